#include "distill/compare/method_result.h"

#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"

namespace retort::distill {

namespace fs = std::filesystem;

nlohmann::json method_result_json(const MethodResult& r) {
  nlohmann::json eval{{"loss", r.eval.loss}, {"perplexity", r.eval.perplexity}, {"tokens", r.eval.tokens}};
  if (r.eval.bits_per_byte) {
    eval["bits_per_byte"] = *r.eval.bits_per_byte;
    eval["bytes"] = r.eval.bytes;
  }
  if (r.eval.kl_to_teacher) eval["kl_to_teacher"] = *r.eval.kl_to_teacher;
  if (r.eval.top1_agreement) eval["top1_agreement"] = *r.eval.top1_agreement;
  nlohmann::json j{{"name", r.name}, {"title", r.title}, {"overrides", r.overrides}, {"available", r.available}};
  if (!r.available) {
    j["unavailable_reason"] = r.unavailable_reason;
    return j;
  }
  j.update({{"student_dir", r.student_dir.string()},
            {"eval", eval},
            {"cache_kind", r.cache_kind},
            {"cache_tokens", r.cache_tokens},
            {"cache_file_bytes", r.cache_file_bytes},
            {"cache_bytes_per_token", r.cache_bytes_per_token},
            {"cache_seconds", r.cache_seconds},
            {"train_seconds", r.train_seconds},
            {"wall_seconds", r.wall_seconds()},
            {"config_fingerprint", r.config_fingerprint}});
  return j;
}

std::optional<MethodResult> read_finished_method(const fs::path& method_dir, const std::string& fingerprint) {
  const fs::path file = method_dir / kMethodResultFile;
  if (!fs::exists(file)) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_file(file));
    if (!j.at("available").get<bool>() || j.at("config_fingerprint").get<std::string>() != fingerprint)
      return std::nullopt;
    MethodResult r;
    r.name = j.at("name").get<std::string>();
    r.title = j.at("title").get<std::string>();
    r.overrides = j.at("overrides").get<std::vector<std::string>>();
    r.student_dir = j.at("student_dir").get<std::string>();
    const nlohmann::json& e = j.at("eval");
    r.eval.loss = e.at("loss").get<double>();
    r.eval.perplexity = e.at("perplexity").get<double>();
    r.eval.tokens = e.at("tokens").get<int64_t>();
    if (e.contains("bits_per_byte")) {
      r.eval.bits_per_byte = e.at("bits_per_byte").get<double>();
      r.eval.bytes = e.at("bytes").get<int64_t>();
    }
    if (e.contains("kl_to_teacher")) r.eval.kl_to_teacher = e.at("kl_to_teacher").get<double>();
    if (e.contains("top1_agreement")) r.eval.top1_agreement = e.at("top1_agreement").get<double>();
    r.cache_kind = j.at("cache_kind").get<std::string>();
    r.cache_tokens = j.at("cache_tokens").get<int64_t>();
    r.cache_file_bytes = j.at("cache_file_bytes").get<int64_t>();
    r.cache_bytes_per_token = j.at("cache_bytes_per_token").get<double>();
    r.cache_seconds = j.at("cache_seconds").get<double>();
    r.train_seconds = j.at("train_seconds").get<double>();
    r.config_fingerprint = fingerprint;
    r.reused = true;
    return r;
  } catch (const nlohmann::json::exception&) {
    // A truncated or hand-damaged record: the method is run again rather than trusted.
    return std::nullopt;
  }
}

}  // namespace retort::distill
