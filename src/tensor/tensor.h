// Tensor: a dense, row-major, host float32 array with a shape.
//
// Shapes are std::vector<int64_t>, outermost dimension first; element (i0, ..., ik) lives at
// offset sum_j i_j * stride_j with stride_k = 1 (contiguous, no views). Storage is owned; copies
// are deep. The kernels in kernels/cpu take raw pointers plus explicit sizes, so a Tensor is
// only the owner of memory and shape, never a compute abstraction.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace ntp {

// Number of elements of a shape (1 for the empty shape, a scalar). Checks every dim >= 0.
int64_t shape_numel(const std::vector<int64_t>& shape);
// "[2, 3, 4]".
std::string shape_string(const std::vector<int64_t>& shape);

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor of the given shape.
  explicit Tensor(std::vector<int64_t> shape);
  Tensor(std::vector<int64_t> shape, std::vector<float> values);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  // Size of dimension i; negative i counts from the end (-1 = innermost).
  int64_t dim(int64_t i) const;
  int64_t numel() const { return static_cast<int64_t>(data_.size()); }

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  std::span<float> span() { return data_; }
  std::span<const float> span() const { return data_; }
  float& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  float operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }

  void fill(float value);
  void zero() { fill(0.0f); }

 private:
  std::vector<int64_t> shape_;
  std::vector<float> data_;
};

}  // namespace ntp
