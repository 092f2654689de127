// NonCopyable: a base for a class that owns what must not be duplicated (a thread, a scoped signal
// mask, a connection, a temporary directory). Deriving from it deletes the copy constructor and
// the copy assignment; with no move of its own declared, the class is not movable either. The
// base has no state (an empty base costs nothing).
#pragma once

namespace ntp {

class NonCopyable {
 public:
  NonCopyable(const NonCopyable&) = delete;
  NonCopyable& operator=(const NonCopyable&) = delete;

 protected:
  NonCopyable() = default;
  ~NonCopyable() = default;
};

}  // namespace ntp
