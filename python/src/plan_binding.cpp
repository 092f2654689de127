#include <pybind11/stl.h>

#include <vector>

#include "api/plan.h"
#include "bindings.h"
#include "status_error.h"

namespace ntp::python {
namespace py = pybind11;

void bind_plan(py::module_& m) {
  m.def(
      "plan_json",
      [](int domains, int tp, int min_tp, const std::string& failed, const std::string& repair,
         int64_t heads, int64_t ffn, int64_t ffn_block, int64_t vocab, int64_t hidden,
         int64_t layers, int64_t grad_bytes, int64_t state_bytes, const std::string& strategy,
         int64_t kv_heads, int64_t experts, int64_t shared_experts,
         const std::vector<double>& expert_loads) {
        api::PlanRequest request;
        request.domains = domains;
        request.tp = tp;
        request.min_tp = min_tp;
        request.failed = failed;
        request.repair = repair;
        request.shape.heads = heads;
        request.shape.ffn = ffn;
        request.shape.ffn_block = ffn_block;
        request.shape.vocab = vocab;
        request.shape.hidden = hidden;
        request.shape.layers = layers;
        request.shape.kv_heads = kv_heads;
        request.shape.experts = experts;
        request.shape.shared_experts = shared_experts;
        request.bytes.grad_bytes = grad_bytes;
        request.bytes.state_bytes = state_bytes;
        request.strategy = strategy;
        request.expert_loads = expert_loads;
        const api::PlanResult result = value_or_throw(api::compute_plan(std::move(request)));
        return api::plan_to_json(result).dump();
      },
      py::arg("domains"), py::arg("tp"), py::arg("min_tp"), py::arg("failed"), py::arg("repair"),
      py::arg("heads"), py::arg("ffn"), py::arg("ffn_block"), py::arg("vocab"), py::arg("hidden"),
      py::arg("layers"), py::arg("grad_bytes"), py::arg("state_bytes"), py::arg("strategy"),
      py::arg("kv_heads") = 0, py::arg("experts") = 0, py::arg("shared_experts") = 0,
      py::arg("expert_loads") = std::vector<double>{},
      "`ntp plan --json` for these flags: the document of docs/plan-json.md, as JSON text.");
}

}  // namespace ntp::python
