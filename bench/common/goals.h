// The goal figures of the project's issues, in one table, and their verdicts in a `moe bench all`
// run. A goal figure is a result name (DESIGN.md §6) that an issue's "Must show" sets a target
// for; it is measured by one suite and never re-measured elsewhere. `moe bench all` (run_all.h)
// adds to results.json, compatibly with the §6 schema:
//   - on each matching result: "goals": [{"issue", "goal", "of", "met"}]
//     (met: true / false, or null when the quantity it is judged on is absent, e.g. no baseline
//     was measured in this run);
//   - at the top level: "goals": [{"figure", "issue", "suite", "goal", "of", "found", "met",
//     "value", "reason"}], one per table entry, including the figures this run did not emit
//     (found 0; reason: the suite's skip reason, or "not emitted by this build").
// bench/README.md's goal table is this table in prose.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace moe::bench {

struct Goal {
  std::string figure;  // result name
  int issue = 0;       // the issue whose "Must show" sets it
  std::string suite;   // the `moe bench` suite that measures it
  std::string of;      // "value" or "ratio" (value / baseline, measured in the same run)
  std::string op;      // ">=", "<=", ">", "<"; "" = reported, no threshold
  double target = 0;
  // Only results whose params[match_key] equals match_value (a string); "" = every result of
  // that name in `suite`.
  std::string match_key, match_value;
  std::string text;  // the goal as the issue states it
};

// Every goal figure, by issue.
const std::vector<Goal>& Goals();

// Whether `result` (one §6 results entry, params.suite set by `moe bench all`) is one `goal`
// judges: same name, same suite, and the params filter.
bool GoalMatches(const Goal& goal, const nlohmann::json& result);

// The verdict of `goal` on a matching `result`: nullopt when the quantity is absent (no
// "ratio" for of=ratio, or a non-numeric value) or the goal has no threshold.
std::optional<bool> GoalMet(const Goal& goal, const nlohmann::json& result);

// Adds "goals" to every matching entry of `results` (an array of §6 results) and returns the
// top-level summary described above. `suites` is results.json's "suites" array (name, status,
// reason), used to say why a figure is missing. A figure matched by several results (several
// presets, say) is met when every judged one is met.
nlohmann::json ApplyGoals(const std::vector<Goal>& goals, nlohmann::json& results,
                          const nlohmann::json& suites);

}  // namespace moe::bench
