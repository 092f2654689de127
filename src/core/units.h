// Strong types for physical quantities so that seconds are never added to bytes.
// Each wraps a double in the SI base unit named by the type (seconds, bytes, watts, FLOP/s).
#pragma once

#include <compare>
#include <cstdint>
#include <string>

namespace ntp {

template <typename Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double value) : value_(value) {}
  constexpr double value() const { return value_; }

  constexpr Quantity operator+(Quantity o) const { return Quantity(value_ + o.value_); }
  constexpr Quantity operator-(Quantity o) const { return Quantity(value_ - o.value_); }
  constexpr Quantity operator*(double k) const { return Quantity(value_ * k); }
  constexpr Quantity operator/(double k) const { return Quantity(value_ / k); }
  constexpr double operator/(Quantity o) const { return value_ / o.value_; }
  constexpr Quantity& operator+=(Quantity o) {
    value_ += o.value_;
    return *this;
  }
  constexpr Quantity& operator-=(Quantity o) {
    value_ -= o.value_;
    return *this;
  }
  constexpr auto operator<=>(const Quantity&) const = default;

 private:
  double value_ = 0.0;
};

struct SecondsTag {};
struct BytesTag {};
struct WattsTag {};
struct FlopsPerSecondTag {};

using Seconds = Quantity<SecondsTag>;
using Bytes = Quantity<BytesTag>;
using Watts = Quantity<WattsTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;

// Human-readable byte count with binary prefixes: "0 B", "1.50 KiB", "3.00 GiB".
std::string format_bytes(double bytes);
// Human-readable duration: "850 us", "1.25 s", "3.2 h", "4.1 d".
std::string format_seconds(double seconds);

}  // namespace ntp
