// What `gridbcast launch` prints: the summary of a broadcast job (text or
// JSON), the failure of any job, and the progress of a running broadcast.
// Pure formatting of job::LaunchResult.
#pragma once

#include <ostream>
#include <string>

#include "job/launcher.hpp"

namespace gridbcast::cli {

void print_broadcast_text(std::ostream& out, const job::BroadcastSummary& s);
void print_broadcast_json(std::ostream& out, const job::BroadcastSummary& s);
// "gridbcast launch: FAILED: <first cause>" and "  then: ..." lines; with
// `json`, the error object of `command` (cli/json_out.hpp) with the "then"
// list on `out` too.
void print_failure(std::ostream& err, std::ostream& out, const std::string& command,
                   const job::LaunchResult& r, bool json);
// One terminal line (no newline; starts with '\r'), and one JSON record.
std::string progress_line(const job::ProgressSample& s);
std::string progress_json(const job::ProgressSample& s);

}  // namespace gridbcast::cli
