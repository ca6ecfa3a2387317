#include "common/measure.hpp"

#include <nlohmann/json.hpp>
#include <string>

#include "common/isolate.hpp"
#include "common/memory.hpp"
#include "linattn/threads.hpp"

namespace linattn::cli {

nlohmann::json timing_json(const std::optional<Timing>& t) {
  if (!t) return nullptr;
  return {{"median", t->median}, {"min", t->min}, {"repetitions", t->repetitions}};
}

namespace {

std::optional<Timing> timing_from_json(const nlohmann::json& j) {
  if (j.is_null()) return std::nullopt;
  return Timing{j.at("median").get<double>(), j.at("min").get<double>(), j.at("repetitions").get<int>()};
}

}  // namespace

Measurement measure(const Problem& p, const MeasureOptions& options) {
  const bool backward = options.backward && has_backward(p.op);
  check_memory(estimated_bytes(p, backward), std::string(op_name(p.op)) + " at N=" + std::to_string(p.seq));
  const std::string reply = run_isolated([&] {
    set_num_threads(options.threads);
    const PeakMeter meter;
    Workload work(p);
    nlohmann::json j;
    j["threads"] = num_threads();
    j["forward"] = options.forward ? timing_json(time_median([&] { work.forward(); }, options.budget_seconds,
                                                             options.min_reps, options.max_reps))
                                   : nlohmann::json(nullptr);
    if (!options.forward) work.forward();
    j["peak_forward"] = meter.growth();
    j["forward_backward"] = backward ? timing_json(time_median(
                                           [&] {
                                             work.forward();
                                             work.backward();
                                           },
                                           options.budget_seconds, options.min_reps, options.max_reps))
                                     : nlohmann::json(nullptr);
    j["peak_total"] = meter.growth();
    return j.dump();
  });
  const auto j = nlohmann::json::parse(reply);
  Measurement m;
  m.threads = j.at("threads").get<int>();
  m.forward = timing_from_json(j.at("forward"));
  m.forward_backward = timing_from_json(j.at("forward_backward"));
  m.peak_forward_bytes = j.at("peak_forward").get<int64_t>();
  m.peak_total_bytes = j.at("peak_total").get<int64_t>();
  return m;
}

}  // namespace linattn::cli
