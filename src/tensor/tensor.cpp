#include "tensor/tensor.h"

#include <algorithm>
#include <utility>

#include "core/check.h"

namespace ntp {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    NTP_CHECK_MSG(d >= 0, "negative dimension in shape " + shape_string(shape));
    n *= d;
  }
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor::Tensor(std::vector<int64_t> shape)
    : shape_(std::move(shape)), data_(static_cast<size_t>(shape_numel(shape_)), 0.0f) {}

Tensor::Tensor(std::vector<int64_t> shape, std::vector<float> values)
    : shape_(std::move(shape)), data_(std::move(values)) {
  NTP_CHECK_MSG(static_cast<int64_t>(data_.size()) == shape_numel(shape_),
                "value count does not match shape " + shape_string(shape_));
}

int64_t Tensor::dim(int64_t i) const {
  const int64_t r = rank();
  if (i < 0) i += r;
  NTP_CHECK_MSG(i >= 0 && i < r, "dimension index out of range");
  return shape_[static_cast<size_t>(i)];
}

void Tensor::fill(float value) { std::fill(data_.begin(), data_.end(), value); }

}  // namespace ntp
