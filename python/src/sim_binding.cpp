#include <pybind11/stl.h>

#include "api/sim_trials.h"
#include "bindings.h"
#include "status_error.h"

namespace ntp::python {
namespace py = pybind11;

void bind_sim(py::module_& m) {
  m.def(
      "sim_records_json",
      [](const std::string& config, const std::vector<std::string>& overrides) {
        nlohmann::ordered_json records;
        {
          // Trials take seconds to minutes: other Python threads run meanwhile.
          py::gil_scoped_release unlocked;
          records = value_or_throw(api::sim_trial_records(config, overrides));
        }
        return records.dump();
      },
      py::arg("config"), py::arg("overrides"),
      "One record per trial and policy of the config's Monte Carlo run, as JSON text.");
}

}  // namespace ntp::python
