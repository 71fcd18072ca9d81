// -v/-q: the level of gridbcast's own diagnostics (lanes/log.hpp).
#include "cli/commands.hpp"
#include "lanes/log.hpp"

namespace gridbcast::cli {

LogFlags add_log_flags(const std::vector<Command>& commands) {
  LogFlags flags;
  for (const auto& c : commands) {
    if (c.command->get_name() == "rank") continue;  // follows GRIDBCAST_LOG_LEVEL
    auto* v = c.command->add_flag(
        "-v,--verbose", *flags.verbose,
        "say more on standard error: -v what the launcher and each rank do (starts, "
        "connections, plan, per-iteration times), -vv per-lane detail");
    auto* q = c.command->add_flag("-q,--quiet", *flags.quiet,
                                  "errors only on standard error (no notes, no progress line)");
    v->excludes(q);
  }
  return flags;
}

void apply_log_flags(const LogFlags& flags) {
  using lanes::log::Level;
  if (*flags.quiet) lanes::log::set_level(Level::kError);
  if (*flags.verbose == 1) lanes::log::set_level(Level::kInfo);
  if (*flags.verbose >= 2) lanes::log::set_level(Level::kDebug);
}

}  // namespace gridbcast::cli
