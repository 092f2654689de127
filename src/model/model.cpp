#include "model/model.h"

namespace ntp::model {

Param* Model::find(std::string_view name) {
  for (Param& p : params()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

Status Model::set_expert_dispatch(ExpertDispatch dispatch) {
  if (dispatch == ExpertDispatch::kAllReduce) return ok_status();
  return invalid_argument(std::string("--expert-dispatch ") + expert_dispatch_name(dispatch) +
                          " needs a model with routed experts (--model moe); this one has none");
}

}  // namespace ntp::model
