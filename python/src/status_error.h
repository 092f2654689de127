// A failed Status crossing into Python: thrown by the bindings, raised as the ntp.errors class
// of its code with the Status's message (the line the CLI prints after "ntp CMD: error: ").
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <utility>

#include "core/status.h"

namespace ntp::python {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(const Status& status)
      : std::runtime_error(status.message()), code_(status.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

// Throws StatusError unless `status` is ok.
inline void throw_if_error(const Status& status) {
  if (!status.ok()) throw StatusError(status);
}

// The value of `result`, or throws StatusError.
template <typename T>
T value_or_throw(Result<T> result) {
  if (!result.ok()) throw StatusError(result.status());
  return std::move(*result);
}

// Registers the translator: kInvalidArgument -> ntp.errors.InvalidArgumentError, kNotFound ->
// NotFoundError, kAlreadyExists -> AlreadyExistsError, anything else -> ntp.errors.Error.
void register_status_errors();

}  // namespace ntp::python
