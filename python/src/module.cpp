// ntp._ntp: the compiled half of the `ntp` Python package. Each binding returns plain data (JSON
// text parsed by the Python side, NumPy arrays filled in place); the classes users see live in
// python/ntp.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "status_error.h"

PYBIND11_MODULE(_ntp, m) {
  m.doc() = "ntp's compiled core; use the `ntp` package, not this module.";
  ntp::python::register_status_errors();
  ntp::python::bind_plan(m);
  ntp::python::bind_sim(m);
  ntp::python::bind_checkpoint(m);
}
