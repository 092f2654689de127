#include "train/speed_estimator.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/named_values.h"

namespace ntp::train {
namespace {

// Median of `values` (the mean of the two middle ones for an even count); values is reordered.
double median_of(std::vector<double>& values) {
  const std::size_t n = values.size();
  const auto mid = values.begin() + static_cast<std::ptrdiff_t>(n / 2);
  std::nth_element(values.begin(), mid, values.end());
  if (n % 2 == 1) return *mid;
  const double upper = *mid;
  const double lower = *std::max_element(values.begin(), mid);
  return 0.5 * (lower + upper);
}

// Standard error of the median of `n` samples whose median absolute deviation is `mad`: the MAD
// of a normal distribution is 0.6745 sigma (so sigma = 1.4826 MAD), and the median of n samples
// has standard error sqrt(pi / 2) sigma / sqrt(n) = 1.2533 sigma / sqrt(n).
double median_standard_error(double mad, int n) {
  return 1.2533 * 1.4826 * mad / std::sqrt(static_cast<double>(n));
}

bool positive_finite(double v) { return std::isfinite(v) && v > 0.0; }

// Weighted median: the smallest value whose weights up to it reach half the total.
double weighted_median(std::vector<std::pair<double, double>>& value_weight) {
  std::sort(value_weight.begin(), value_weight.end());
  double total = 0.0;
  for (const auto& [v, w] : value_weight) total += w;
  double seen = 0.0;
  for (const auto& [v, w] : value_weight) {
    seen += w;
    if (seen >= 0.5 * total) return v;
  }
  return value_weight.back().first;
}

// Work levels closer than this (relative) are one level: the slope between two noisy medians a
// few percent apart is mostly noise (at 5%, 3% jitter made the half-speed test's healthy ranks
// look slowed after the move, and it re-weighted once more than it should).
constexpr double kDistinctWork = 0.10;
// F is clamped here: a fit that puts more of a step in its fixed part has no spread to trust, and
// capacities (v - F) / (1 - F) would amplify noise without bound.
constexpr double kMaxFixedFraction = 0.8;
// The least capacity a kept rank is given as a layout weight.
constexpr double kMinCapacity = 0.01;

// One step's fixed fraction F (speed_estimator.h) from the ranks not counted as slowed, or NaN
// when those hold too few distinct amounts of work. Ranks are grouped into work levels; each
// level is its median seconds. The slope is the median of the slopes between levels and the
// intercept the median of the levels' residuals, each weighted by how many ranks stand behind it
// (pairs: the product of the levels' counts), so that a rank slowed but not yet counted as such
// moves neither; groups keep the cost at O(n log n) for a job of any size. A slowed rank is left
// out: it is the one whose work a rebalance changes, and its time says its speed, not F.
double fit_fixed_fraction(std::span<const double> seconds, std::span<const double> work,
                          const std::vector<bool>& slowed) {
  std::vector<std::size_t> order;
  for (std::size_t r = 0; r < work.size(); ++r) {
    if (!slowed[r]) order.push_back(r);
  }
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return work[a] < work[b]; });
  struct Level {
    double work, seconds, ranks;
  };
  std::vector<Level> levels;
  double mean_work = 0.0;  // over every rank: F is a fraction of the mean rank's step
  for (double w : work) mean_work += w / static_cast<double>(work.size());
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin;
    std::vector<double> level_seconds;
    while (end < order.size() && work[order[end]] <= work[order[begin]] * (1.0 + kDistinctWork)) {
      level_seconds.push_back(seconds[order[end]]);
      ++end;
    }
    levels.push_back({work[order[(begin + end) / 2]], median_of(level_seconds),
                      static_cast<double>(end - begin)});
    begin = end;
  }
  if (levels.size() < 2) return std::nan("");
  std::vector<std::pair<double, double>> slopes;
  for (std::size_t i = 0; i < levels.size(); ++i) {
    for (std::size_t j = i + 1; j < levels.size(); ++j) {
      slopes.emplace_back(
          (levels[j].seconds - levels[i].seconds) / (levels[j].work - levels[i].work),
          levels[i].ranks * levels[j].ranks);
    }
  }
  const double per_work = weighted_median(slopes);
  if (!(per_work > 0.0)) return std::nan("");
  std::vector<std::pair<double, double>> intercepts;
  for (const Level& l : levels) intercepts.emplace_back(l.seconds - per_work * l.work, l.ranks);
  const double fixed = weighted_median(intercepts);
  return std::clamp(fixed / (fixed + per_work * mean_work), 0.0, kMaxFixedFraction);
}

}  // namespace

Status validate_speed_estimator_options(const SpeedEstimatorOptions& o) {
  if (o.window < 3) {
    return invalid_argument("speed window " + std::to_string(o.window) +
                            " is too short: a median and its spread need at least 3 steps");
  }
  if (o.consecutive < 1) {
    return invalid_argument("speed consecutive " + std::to_string(o.consecutive) +
                            " must be at least 1 (evaluations in a row before a proposal)");
  }
  if (!(o.threshold > 0.0 && o.threshold < 1.0)) {
    return invalid_argument("speed threshold " + std::to_string(o.threshold) +
                            " must be a fraction in (0, 1), e.g. 0.1 for a 10% gain");
  }
  if (!(o.drop_below > 0.0 && o.drop_below < 1.0)) {
    return invalid_argument("speed drop_below " + std::to_string(o.drop_below) +
                            " must be a fraction in (0, 1) of the job's median speed, e.g. 0.3");
  }
  if (!positive_finite(o.significance)) {
    return invalid_argument("speed significance " + std::to_string(o.significance) +
                            " must be a positive number of standard errors, e.g. 5");
  }
  if (!(std::isfinite(o.reform_cost_s) && o.reform_cost_s >= 0.0)) {
    return invalid_argument("speed reform_cost_s " + std::to_string(o.reform_cost_s) +
                            " must be a finite number of seconds >= 0, e.g. 0.5");
  }
  return ok_status();
}

const char* speed_proposal_name(SpeedProposal proposal) {
  static constexpr NamedValue<SpeedProposal> kNames[] = {{SpeedProposal::kNone, "none"},
                                                         {SpeedProposal::kRebalance, "rebalance"},
                                                         {SpeedProposal::kEqualize, "equalize"}};
  return name_of(kNames, proposal);
}

SpeedEstimator::SpeedEstimator(std::vector<int> replica_of_rank, SpeedEstimatorOptions options)
    : options_(options), replica_of_rank_(std::move(replica_of_rank)) {
  replicas_ = 1 + *std::max_element(replica_of_rank_.begin(), replica_of_rank_.end());
  slowed_.assign(replica_of_rank_.size(), false);
  below_.assign(replica_of_rank_.size(), 0);
  adopted_.assign(replica_of_rank_.size(), 1.0);
}

void SpeedEstimator::set_reform_cost(double seconds) {
  if (std::isfinite(seconds) && seconds >= 0.0) options_.reform_cost_s = seconds;
}

Result<SpeedEstimator> SpeedEstimator::create(std::vector<int> replica_of_rank,
                                              SpeedEstimatorOptions options) {
  NTP_RETURN_IF_ERROR(validate_speed_estimator_options(options));
  if (replica_of_rank.empty()) {
    return invalid_argument("a speed estimator needs at least one rank");
  }
  for (std::size_t r = 0; r < replica_of_rank.size(); ++r) {
    if (replica_of_rank[r] < 0) {
      return invalid_argument("rank " + std::to_string(r) + " has replica id " +
                              std::to_string(replica_of_rank[r]) + "; replica ids are >= 0");
    }
  }
  return SpeedEstimator(std::move(replica_of_rank), options);
}

double SpeedEstimator::predict(std::span<const double> weights, std::span<const double> speeds,
                               std::span<const double> work, double rate,
                               double fixed_fraction) const {
  std::vector<double> replica_work(static_cast<std::size_t>(replicas_), 0.0);
  std::vector<double> replica_weight(static_cast<std::size_t>(replicas_), 0.0);
  for (std::size_t r = 0; r < work.size(); ++r) {
    const auto d = static_cast<std::size_t>(replica_of_rank_[r]);
    replica_work[d] += work[r];
    replica_weight[d] += weights[r];
  }
  double job_work = 0.0, job_weight = 0.0;
  for (std::size_t d = 0; d < replica_work.size(); ++d) {
    job_work += replica_work[d];
    job_weight += replica_weight[d];
  }
  // A rank's fixed part, in work units: F of a full-speed rank of mean work.
  const double fixed_work = fixed_fraction * job_work / static_cast<double>(work.size());
  double slowest = 0.0;
  for (std::size_t r = 0; r < work.size(); ++r) {
    const auto d = static_cast<std::size_t>(replica_of_rank_[r]);
    const double share = options_.share_by_pace ? job_work * weights[r] / job_weight
                                                : replica_work[d] * weights[r] / replica_weight[d];
    slowest = std::max(slowest, (fixed_work + (1.0 - fixed_fraction) * share) / (speeds[r] * rate));
  }
  return slowest;
}

double SpeedEstimator::window_fixed_fraction() {
  std::vector<double> seen;
  for (double f : fixed_fraction_) {
    if (!std::isnan(f)) seen.push_back(f);
  }
  if (!seen.empty()) known_fixed_fraction_ = median_of(seen);
  return known_fixed_fraction_;
}

Result<SpeedVerdict> SpeedEstimator::observe(std::span<const double> compute_seconds,
                                             std::span<const double> work) {
  const std::size_t n = replica_of_rank_.size();
  if (compute_seconds.size() != n || work.size() != n) {
    return invalid_argument("a step's timings cover " + std::to_string(compute_seconds.size()) +
                            " ranks and its work " + std::to_string(work.size()) +
                            ", the job has " + std::to_string(n) + "; give one value per rank");
  }
  for (std::size_t r = 0; r < n; ++r) {
    if (!positive_finite(compute_seconds[r]) || !positive_finite(work[r])) {
      return invalid_argument("rank " + std::to_string(r) + " reported " + std::to_string(work[r]) +
                              " work in " + std::to_string(compute_seconds[r]) +
                              " s; both must be finite and > 0");
    }
  }
  std::vector<double> rate(n);
  for (std::size_t r = 0; r < n; ++r) rate[r] = work[r] / compute_seconds[r];
  std::vector<double> scratch = rate;
  job_rate_.push_back(median_of(scratch));
  fixed_fraction_.push_back(fit_fixed_fraction(compute_seconds, work, slowed_));
  const auto window = static_cast<std::size_t>(options_.window);
  if (job_rate_.size() > window) {
    job_rate_.pop_front();
    fixed_fraction_.pop_front();
  }
  // Relative rates: predicted full-speed seconds (affine, in work units) over measured seconds,
  // normalized by the step's median.
  const double fixed_fraction = window_fixed_fraction();
  double mean_work = 0.0;
  for (double w : work) mean_work += w / static_cast<double>(n);
  for (std::size_t r = 0; r < n; ++r) {
    rate[r] = (fixed_fraction * mean_work + (1.0 - fixed_fraction) * work[r]) / compute_seconds[r];
  }
  scratch = rate;
  const double median_rate = median_of(scratch);
  for (double& v : rate) v /= median_rate;
  relative_.push_back(std::move(rate));
  if (relative_.size() > window) relative_.pop_front();
  SpeedVerdict verdict;
  if (relative_.size() < window) return verdict;
  verdict.fixed_fraction = fixed_fraction;
  // A rank at speed v does (v - F) / (1 - F) of a full-speed rank's work in the same time; as a
  // layout weight it stays positive (a weight of 0 holds no unit, which only dropping does).
  auto capacity = [fixed_fraction](double v) {
    return std::max(kMinCapacity, (v - fixed_fraction) / (1.0 - fixed_fraction));
  };

  // Noise scale: pooled over every rank and step of the window.
  scratch.clear();
  for (const std::vector<double>& step : relative_) {
    for (double v : step) scratch.push_back(std::abs(v - 1.0));
  }
  const double se = median_standard_error(median_of(scratch), options_.window);
  const double z = options_.significance;
  verdict.raw_speeds.resize(n);
  verdict.speeds.resize(n);
  std::vector<double> effective(n);  // speeds for predict(): raw where slowed, else 1
  for (std::size_t r = 0; r < n; ++r) {
    scratch.clear();
    for (const std::vector<double>& step : relative_) scratch.push_back(step[r]);
    const double raw = median_of(scratch);
    for (double& v : scratch) v = std::abs(v - raw);
    const double own_se = median_standard_error(median_of(scratch), options_.window);
    // Below full speed by this much (a rank measured faster is a healthy one: full speed is what
    // the job's median rank does, and a CPU host's scheduler makes some ranks look faster for a
    // while; taking those as fast devices gave a 1.29 rank a weight of 2.06 under F = 0.73).
    const double off = 1.0 - raw;
    // Slowed once clearly off by the pooled noise and by its own window's spread (two standard
    // errors: a window straddling a change spreads wide); full speed again within z/2 errors.
    if (off > z * se && off > 2.0 * own_se) {
      slowed_[r] = true;
    } else if (off <= 0.5 * z * se) {
      slowed_[r] = false;
    }
    verdict.raw_speeds[r] = raw;
    effective[r] = slowed_[r] ? raw : 1.0;
    verdict.speeds[r] = slowed_[r] ? capacity(raw) : 1.0;
    // Too slow: slowed (significantly, as above) and its speed under the bound. Not its capacity:
    // a rank of capacity c still adds c to its replica, so keeping it beats dropping it whatever
    // c is; a CPU host's tiny test models fit F near its 0.8 cap, where capacity turns a 14%
    // slowdown into 0.3 and dropped a healthy rank.
    below_[r] = slowed_[r] && raw < options_.drop_below ? below_[r] + 1 : 0;
    if (below_[r] >= options_.consecutive) verdict.too_slow.push_back(static_cast<int>(r));
  }

  scratch.assign(job_rate_.begin(), job_rate_.end());
  const double typical_rate = median_of(scratch);
  const std::vector<double> equal(n, 1.0);
  verdict.equal_seconds = predict(equal, effective, work, typical_rate, fixed_fraction);
  verdict.weighted_seconds = predict(verdict.speeds, effective, work, typical_rate, fixed_fraction);
  verdict.current_seconds = predict(adopted_, effective, work, typical_rate, fixed_fraction);

  const double keep = 1.0 - options_.threshold;  // a layout must cut the time below keep x ...
  SpeedProposal candidate = SpeedProposal::kNone;
  if (!weighted_) {
    if (verdict.weighted_seconds < keep * verdict.equal_seconds) {
      candidate = SpeedProposal::kRebalance;
    }
  } else if (verdict.weighted_seconds >= keep * verdict.equal_seconds) {
    candidate = SpeedProposal::kEqualize;
  } else if (verdict.weighted_seconds < keep * verdict.current_seconds) {
    // Re-weight only for a real move: some rank's speed left its adopted value by more than the
    // noise (relative rates of a slow rank are noisy in proportion to its speed).
    for (std::size_t r = 0; r < n; ++r) {
      const double scale = std::max(verdict.speeds[r], adopted_[r]);
      if (std::abs(verdict.speeds[r] - adopted_[r]) > z * se * scale) {
        candidate = SpeedProposal::kRebalance;
        break;
      }
    }
  }
  // What the candidate would save a step: the weighted split's time, or the equal one's, against
  // the weights in use (never negative: staying put costs nothing then).
  double saving = 0.0;
  if (candidate != SpeedProposal::kNone) {
    const double proposed =
        candidate == SpeedProposal::kRebalance ? verdict.weighted_seconds : verdict.equal_seconds;
    saving = std::max(0.0, verdict.current_seconds - proposed);
  }
  if (candidate == SpeedProposal::kNone || candidate != candidate_) {
    streak_ = candidate == SpeedProposal::kNone ? 0 : 1;
    saved_ = saving;
  } else {
    ++streak_;
    saved_ += saving;
  }
  candidate_ = candidate;
  verdict.saved_seconds = saved_;
  if (candidate_ != SpeedProposal::kNone && streak_ >= options_.consecutive &&
      saved_ >= options_.reform_cost_s) {
    verdict.proposal = candidate_;
    weighted_ = candidate_ == SpeedProposal::kRebalance;
    adopted_ = weighted_ ? verdict.speeds : equal;
    candidate_ = SpeedProposal::kNone;
    streak_ = 0;
    saved_ = 0.0;
  }
  return verdict;
}

}  // namespace ntp::train
