#include "core/status.h"

#include "core/named_values.h"

namespace ntp {

std::string_view status_code_name(StatusCode code) {
  static constexpr NamedValue<StatusCode> kNames[] = {
      {StatusCode::kOk, "OK"},
      {StatusCode::kInvalidArgument, "INVALID_ARGUMENT"},
      {StatusCode::kUnavailable, "UNAVAILABLE"},
      {StatusCode::kDeadlineExceeded, "DEADLINE_EXCEEDED"},
      {StatusCode::kFailedPrecondition, "FAILED_PRECONDITION"},
      {StatusCode::kNotFound, "NOT_FOUND"},
      {StatusCode::kAlreadyExists, "ALREADY_EXISTS"},
      {StatusCode::kOutOfRange, "OUT_OF_RANGE"},
      {StatusCode::kResourceExhausted, "RESOURCE_EXHAUSTED"},
      {StatusCode::kAborted, "ABORTED"},
      {StatusCode::kInternal, "INTERNAL"},
      {StatusCode::kUnimplemented, "UNIMPLEMENTED"}};
  return name_of(kNames, code, "UNKNOWN");
}

std::string Status::to_string() const {
  if (ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

}  // namespace ntp
