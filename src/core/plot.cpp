#include "core/plot.h"

#include <cstdlib>
#include <fstream>

namespace ntp {

Status render_plots(const std::string& dir, const std::string& preamble,
                    const std::vector<Plot>& plots) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    return failed_precondition(
        "gnuplot is not installed; skipped the plots (apt-get install gnuplot-nox)");
  }
  const std::string script = dir + "/plots.gp";
  std::ofstream gp(script);
  if (!gp) return internal_error("cannot write " + script);
  gp << preamble;
  for (const auto& [terminal, ext] :
       {std::pair<std::string, std::string>{
            "svg size 1000,560 dynamic noenhanced background rgb 'white'", "svg"},
        {"png size 1000,560 noenhanced", "png"}}) {
    gp << "set terminal " << terminal << "\n";
    for (const Plot& p : plots) {
      gp << "set output '" << dir << "/" << p.base_name << "." << ext << "'\n" << p.commands;
    }
  }
  gp.close();
  const std::string cmd = "gnuplot '" + script + "' 2>'" + dir + "/gnuplot.log'";
  if (std::system(cmd.c_str()) != 0) {
    return internal_error("gnuplot failed on " + script + "; see " + dir + "/gnuplot.log");
  }
  return ok_status();
}

}  // namespace ntp
