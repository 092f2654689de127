#include "comm/communicator.h"

#include "core/named_values.h"

namespace ntp::comm {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kUInt8:
      return 1;
  }
  NTP_CHECK_MSG(false, "unknown DType");
  return 0;
}

const char* dtype_name(DType dtype) {
  static constexpr NamedValue<DType> kNames[] = {{DType::kFloat32, "float32"},
                                                 {DType::kFloat64, "float64"},
                                                 {DType::kInt32, "int32"},
                                                 {DType::kInt64, "int64"},
                                                 {DType::kUInt8, "uint8"}};
  return name_of(kNames, dtype, "unknown");
}

}  // namespace ntp::comm
