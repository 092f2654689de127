// Drawing plots with gnuplot (Debian's gnuplot-nox): every plot as an SVG and a PNG file.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace ntp {

struct Plot {
  std::string base_name;  // DIR/<base_name>.svg and .png
  std::string commands;   // gnuplot commands that draw it (title, labels, the plot command)
};

// Writes DIR/plots.gp (the `preamble`, then every plot for each terminal) and runs gnuplot on it.
// kFailedPrecondition (a note for the caller to print) when gnuplot is not installed; kInternal,
// naming DIR/gnuplot.log, when gnuplot fails.
Status render_plots(const std::string& dir, const std::string& preamble,
                    const std::vector<Plot>& plots);

}  // namespace ntp
