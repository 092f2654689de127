#include "model/model.h"

namespace ntp::model {

Param* Model::find(std::string_view name) {
  for (Param& p : params()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

}  // namespace ntp::model
