// Five-field cron schedules (minute hour day-of-month month day-of-week, UTC), as the CRDs'
// `schedule` fields: numbers, `*`, ranges `a-b`, steps `*/n` and `a-b/n`, lists `a,b`; day of
// week 0-7 (0 and 7 are Sunday); when both day fields are restricted a day matches either
// (Vixie cron). No names (`MON`), no `@daily`.
#pragma once

#include <bitset>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace moe::op {

class CronSchedule {
 public:
  // INVALID_ARGUMENT naming the field for anything else.
  static absl::StatusOr<CronSchedule> Parse(const std::string& text);
  // The first minute strictly after `t` that matches (UTC); InfiniteFuture when none within
  // five years (e.g. "0 0 31 2 *").
  absl::Time Next(absl::Time t) const;

 private:
  std::bitset<60> minutes_;
  std::bitset<24> hours_;
  std::bitset<32> days_;     // 1..31
  std::bitset<13> months_;   // 1..12
  std::bitset<7> weekdays_;  // 0..6, Sunday 0
  bool days_restricted_ = false;
  bool weekdays_restricted_ = false;
};

}  // namespace moe::op
