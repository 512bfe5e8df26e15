#include "services/operator/core/cron.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace moe::op {
namespace {

// Fills bits [lo, hi] of `field` from `text`; false on a syntax or range error.
template <size_t N>
bool ParseField(const std::string& text, int lo, int hi, std::bitset<N>& field, bool* restricted) {
  *restricted = false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    std::vector<std::string> step = absl::StrSplit(part, '/');
    if (step.empty() || step.size() > 2) return false;
    int every = 1;
    if (step.size() == 2 && (!absl::SimpleAtoi(step[1], &every) || every < 1)) return false;
    int a = lo, b = hi;
    if (step[0] == "*") {
      if (step.size() == 1) {
        for (int v = lo; v <= hi; ++v) field.set(static_cast<size_t>(v));
        continue;
      }
    } else {
      std::vector<std::string> range = absl::StrSplit(step[0], '-');
      if (range.size() > 2 || !absl::SimpleAtoi(range[0], &a)) return false;
      b = a;
      if (range.size() == 2 && !absl::SimpleAtoi(range[1], &b)) return false;
      if (range.size() == 1 && step.size() == 2) b = hi;
      if (a < lo || b > hi || a > b) return false;
    }
    *restricted = true;
    for (int v = a; v <= b; v += every) field.set(static_cast<size_t>(v));
  }
  return field.any();
}

}  // namespace

absl::StatusOr<CronSchedule> CronSchedule::Parse(const std::string& text) {
  std::vector<std::string> f = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  if (f.size() != 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("cron \"", text, "\": want 5 fields (minute hour day month weekday)"));
  }
  CronSchedule c;
  bool r = false;
  std::bitset<8> weekdays;
  const char* names[] = {"minute", "hour", "day of month", "month", "day of week"};
  const bool ok[] = {ParseField(f[0], 0, 59, c.minutes_, &r), ParseField(f[1], 0, 23, c.hours_, &r),
                     ParseField(f[2], 1, 31, c.days_, &c.days_restricted_),
                     ParseField(f[3], 1, 12, c.months_, &r),
                     ParseField(f[4], 0, 7, weekdays, &c.weekdays_restricted_)};
  for (int i = 0; i < 5; ++i) {
    if (!ok[i]) {
      return absl::InvalidArgumentError(
          absl::StrCat("cron \"", text, "\": bad ", names[i], " field \"", f[i], "\""));
    }
  }
  for (int d = 0; d < 7; ++d) c.weekdays_[d] = weekdays[d];
  if (weekdays[7]) c.weekdays_[0] = true;
  return c;
}

absl::Time CronSchedule::Next(absl::Time t) const {
  const absl::TimeZone utc = absl::UTCTimeZone();
  absl::CivilMinute m = absl::ToCivilMinute(t, utc) + 1;
  const absl::CivilMinute end = m + 5 * 366 * 24 * 60;
  while (m < end) {
    const absl::CivilDay day(m);
    const bool dom = days_[static_cast<size_t>(day.day())];
    const bool dow =
        weekdays_[static_cast<size_t>(static_cast<int>(absl::GetWeekday(day)) == 6
                                          ? 0
                                          : static_cast<int>(absl::GetWeekday(day)) + 1)];
    bool day_ok;
    if (days_restricted_ && weekdays_restricted_) {
      day_ok = dom || dow;
    } else {
      day_ok = dom && dow;
    }
    if (!months_[static_cast<size_t>(m.month())] || !day_ok) {
      m = absl::CivilMinute(absl::CivilDay(m) + 1);
      continue;
    }
    if (!hours_[static_cast<size_t>(m.hour())]) {
      m = absl::CivilMinute(absl::CivilHour(m) + 1);
      continue;
    }
    if (minutes_[static_cast<size_t>(m.minute())]) return absl::FromCivil(m, utc);
    m += 1;
  }
  return absl::InfiniteFuture();
}

}  // namespace moe::op
