// The bindings of ntp._ntp, one function a concept.
#pragma once

#include <pybind11/pybind11.h>

namespace ntp::python {

void bind_plan(pybind11::module_& m);        // plan_json
void bind_sim(pybind11::module_& m);         // sim_records_json
void bind_checkpoint(pybind11::module_& m);  // Reader, consolidate

}  // namespace ntp::python
