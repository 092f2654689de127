// How every `ntp` subcommand reports failure: one line on stderr, a meaningful exit code.
#pragma once

#include <string_view>

#include "core/status.h"

namespace ntp::cli {

// Exit codes shared by all subcommands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;  // the work itself failed (I/O, a peer, a bug)
inline constexpr int kExitBadInput =
    2;  // the user's input is wrong; the message says how to fix it

// Prints "ntp <command>: error: <message>" to stderr and returns the exit code for `status`
// (kExitBadInput for kInvalidArgument, kExitFailure otherwise). Nothing is printed on stdout.
int report_error(std::string_view command, const Status& status);

}  // namespace ntp::cli
