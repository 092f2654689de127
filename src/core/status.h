// Status and Result<T>: how recoverable errors travel through ntp.
//
// The code tells the caller what to do about the error (DESIGN.md section 3):
//   kInvalidArgument    the input is wrong: fix it (CLI exit code 2).
//   kUnavailable        a peer is gone: re-form the group and retry.
//   kDeadlineExceeded   an operation ran past its timeout (a hung peer looks like this).
//   kFailedPrecondition the system is not in a state where the call makes sense.
//   kNotFound, kAlreadyExists, kOutOfRange, kResourceExhausted, kAborted, kInternal, kUnimplemented
//                       as their names say.
// Invariants that can only fail through a bug use NTP_CHECK (core/check.h), not Status.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "core/check.h"

namespace ntp {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kUnavailable,
  kDeadlineExceeded,
  kFailedPrecondition,
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kResourceExhausted,
  kAborted,
  kInternal,
  kUnimplemented,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message" (or "OK").
  std::string to_string() const;

  // Returns a copy whose message is "context: message"; OK stays OK.
  Status with_context(std::string_view context) const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status unavailable(std::string message) {
  return Status(StatusCode::kUnavailable, std::move(message));
}
inline Status deadline_exceeded(std::string message) {
  return Status(StatusCode::kDeadlineExceeded, std::move(message));
}
inline Status failed_precondition(std::string message) {
  return Status(StatusCode::kFailedPrecondition, std::move(message));
}
inline Status not_found(std::string message) {
  return Status(StatusCode::kNotFound, std::move(message));
}
inline Status out_of_range(std::string message) {
  return Status(StatusCode::kOutOfRange, std::move(message));
}
inline Status internal_error(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}
inline Status unimplemented(std::string message) {
  return Status(StatusCode::kUnimplemented, std::move(message));
}

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    NTP_CHECK_MSG(!std::get<Status>(data_).ok(), "Result built from an OK Status has no value");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  Status status() const { return ok() ? Status() : std::get<Status>(data_); }

  const T& value() const& {
    NTP_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(data_).to_string());
    return std::get<T>(data_);
  }
  T& value() & {
    NTP_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(data_).to_string());
    return std::get<T>(data_);
  }
  T&& value() && {
    NTP_CHECK_MSG(ok(), "Result::value() on error: " + std::get<Status>(data_).to_string());
    return std::get<T>(std::move(data_));
  }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace ntp

#define NTP_STATUS_CONCAT_INNER(a, b) a##b
#define NTP_STATUS_CONCAT(a, b) NTP_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define NTP_RETURN_IF_ERROR(expr) NTP_RETURN_IF_ERROR_WITH(return, expr)

// `NTP_ASSIGN_OR_RETURN(auto x, make_x());` declares x from a Result or returns its error.
#define NTP_ASSIGN_OR_RETURN(lhs, expr) NTP_ASSIGN_OR_RETURN_WITH(return, ntp_result_, lhs, expr)

// The two above with the return statement named (`return`, or `co_return` in a coroutine:
// elastic/task.h) and, for the assignment, the prefix of its hidden Result's name.
#define NTP_RETURN_IF_ERROR_WITH(return_keyword, expr)         \
  do {                                                         \
    ::ntp::Status ntp_status_tmp_ = (expr);                    \
    if (!ntp_status_tmp_.ok()) return_keyword ntp_status_tmp_; \
  } while (false)
#define NTP_ASSIGN_OR_RETURN_WITH(return_keyword, prefix, lhs, expr) \
  NTP_ASSIGN_OR_RETURN_IMPL(return_keyword, NTP_STATUS_CONCAT(prefix, __LINE__), lhs, expr)
#define NTP_ASSIGN_OR_RETURN_IMPL(return_keyword, result, lhs, expr) \
  auto result = (expr);                                              \
  if (!result.ok()) return_keyword result.status();                  \
  lhs = std::move(result).value()
