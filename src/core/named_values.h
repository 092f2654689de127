// An enumeration's names as one table, so that printing a value and parsing a name cannot
// disagree, and a parse error can list every name it accepts:
//   constexpr NamedValue<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   name_of(kColorNames, Color::kRed)                -> "red"
//   value_named(kColorNames, "blue")                 -> Color::kBlue (nullopt for other text)
//   parse_named(kColorNames, "--color", "green")     -> kInvalidArgument
//       "--color 'green' is unknown; use red or blue"
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace ntp {

template <typename E>
struct NamedValue {
  E value;
  const char* name;
};

// The name `table` gives `value`; `unlisted` for a value it does not list.
template <typename E, std::size_t N>
constexpr const char* name_of(const NamedValue<E> (&table)[N], E value,
                              const char* unlisted = "?") {
  for (const NamedValue<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return unlisted;
}

// The value `table` names `name` (exact, case-sensitive), or nullopt.
template <typename E, std::size_t N>
constexpr std::optional<E> value_named(const NamedValue<E> (&table)[N], std::string_view name) {
  for (const NamedValue<E>& entry : table) {
    if (name == entry.name) return entry.value;
  }
  return std::nullopt;
}

// The table's names in its order, "a, b or c": the choices an error message offers.
template <typename E, std::size_t N>
std::string name_choices(const NamedValue<E> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The value named `text`, or kInvalidArgument "<flag> '<text>' is unknown; use a, b or c".
template <typename E, std::size_t N>
Result<E> parse_named(const NamedValue<E> (&table)[N], std::string_view flag,
                      std::string_view text) {
  if (std::optional<E> value = value_named(table, text)) return *value;
  return invalid_argument(std::string(flag) + " '" + std::string(text) + "' is unknown; use " +
                          name_choices(table));
}

}  // namespace ntp
