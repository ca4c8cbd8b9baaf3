#include "bench/harness/json_lines.h"

#include <utility>

#include "core/util/error.h"

namespace retort::bench {

nlohmann::json stamped(nlohmann::json record, const RecordOrigin& origin) {
  if (!record.contains("commit")) record["commit"] = origin.commit;
  if (!record.contains("date")) record["date"] = origin.date;
  if (!record.contains("device")) {
    record["device"] = origin.device;
  } else if (record["device"] != origin.device && !record.contains("device_name")) {
    record["device_name"] = origin.device;
  }
  return record;
}

JsonLinesWriter::JsonLinesWriter(const std::string& path, Mode mode, RecordOrigin origin)
    : out_(path, mode == Mode::Append ? std::ios::app : std::ios::trunc), origin_(std::move(origin)) {
  RETORT_INPUT_CHECK(out_.good(), "cannot write --json file '{}'", path);
}

void JsonLinesWriter::write(const nlohmann::json& record) {
  out_ << stamped(record, origin_).dump() << '\n';
  out_.flush();
}

}  // namespace retort::bench
