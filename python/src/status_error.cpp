#include "status_error.h"

#include "core/named_values.h"

namespace ntp::python {
namespace py = pybind11;

namespace {

// The ntp.errors class of a code; the others raise the base class, ntp.errors.Error.
const char* error_class(StatusCode code) {
  static constexpr NamedValue<StatusCode> kClasses[] = {
      {StatusCode::kInvalidArgument, "InvalidArgumentError"},
      {StatusCode::kNotFound, "NotFoundError"},
      {StatusCode::kAlreadyExists, "AlreadyExistsError"}};
  return name_of(kClasses, code, "Error");
}

}  // namespace

void register_status_errors() {
  py::register_exception_translator([](std::exception_ptr thrown) {
    try {
      if (thrown) std::rethrow_exception(thrown);
    } catch (const StatusError& e) {
      const py::object cls = py::module_::import("ntp.errors").attr(error_class(e.code()));
      PyErr_SetString(cls.ptr(), e.what());
    }
  });
}

}  // namespace ntp::python
