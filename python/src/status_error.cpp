#include "status_error.h"

namespace ntp::python {
namespace py = pybind11;

namespace {

const char* error_class(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case StatusCode::kNotFound:
      return "NotFoundError";
    case StatusCode::kAlreadyExists:
      return "AlreadyExistsError";
    default:
      return "Error";
  }
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
