#include "bench/harness/record_origin.h"

#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace retort::bench {
namespace {

std::string git_short_head() {
  // stderr goes nowhere: outside a checkout, or without git, the answer is simply "unknown".
  FILE* pipe = popen("git rev-parse --short HEAD 2>/dev/null", "r");
  if (pipe == nullptr) return "";
  std::string out;
  char buffer[128];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
  const int status = pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r' || out.back() == ' ')) out.pop_back();
  return status == 0 ? out : "";
}

std::string commit() {
  if (const char* given = std::getenv(kCommitEnv); given != nullptr && *given != '\0') return given;
  const std::string head = git_short_head();
  return head.empty() ? "unknown" : head;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

}  // namespace

RecordOrigin record_origin(const std::string& device_name) {
  return RecordOrigin{commit(), device_name, utc_now()};
}

}  // namespace retort::bench
