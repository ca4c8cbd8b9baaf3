#include "distill/xtoken/vocab_projection_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/data/content_hash.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"

namespace retort::distill::xtoken {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "the projection file is little-endian");

constexpr std::string_view kMagic = "RTVPROJ\n";
constexpr std::string_view kTrailerTag = "fnv1a64 ";
constexpr size_t kTrailerSize = 8 + 16;
constexpr int kFormatVersion = 1;

std::string fix_for(const fs::path& path) {
  return fmt::format("delete '{}' to rebuild it", path.string());
}

json identity_json(const ProjectionIdentity& id) {
  return {{"student",
           {{"tokenizer_fingerprint", id.student_fingerprint},
            {"tokenizer_vocab", id.student_tokenizer_vocab},
            {"model_vocab", id.student_model_vocab}}},
          {"teacher",
           {{"tokenizer_fingerprint", id.teacher_fingerprint},
            {"tokenizer_vocab", id.teacher_tokenizer_vocab},
            {"model_vocab", id.teacher_model_vocab}}}};
}

json options_json(const ProjectionOptions& options) {
  return {{"max_pieces", options.max_pieces}, {"decay", options.decay}, {"reverse_pass", options.reverse_pass}};
}

// What differs between the file's identity and options and the expected ones, in words.
std::string differences(const json& file, const json& expected) {
  std::vector<std::string> out;
  for (const char* side : {"student", "teacher"}) {
    for (const char* key : {"tokenizer_fingerprint", "tokenizer_vocab", "model_vocab"}) {
      const json& was = file.at("identity").at(side).at(key);
      const json& now = expected.at("identity").at(side).at(key);
      if (was != now)
        out.push_back(fmt::format("the {} {} is {} in the file, {} here", side, key, was.dump(), now.dump()));
    }
  }
  for (const auto& [key, now] : expected.at("options").items()) {
    const json was = file.at("options").value(key, json());
    if (was != now) out.push_back(fmt::format("option {} is {} in the file, {} here", key, was.dump(), now.dump()));
  }
  std::string text;
  for (size_t i = 0; i < out.size(); ++i) text += (i ? "; " : "") + out[i];
  return text;
}

template <typename T>
void append(std::string& out, const std::vector<T>& values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

template <typename T>
std::vector<T> take(std::string_view& in, size_t count) {
  std::vector<T> values(count);
  std::memcpy(values.data(), in.data(), count * sizeof(T));
  in.remove_prefix(count * sizeof(T));
  return values;
}

}  // namespace

void save_projection(const StudentTeacherProjection& projection, const fs::path& path) {
  const std::vector<int32_t> offsets = projection.matrix.row_offsets.to_ints();
  const std::vector<int32_t> ids = projection.matrix.teacher_ids.to_ints();
  const std::vector<float> weights = projection.matrix.weights.to_floats();
  std::string payload;
  append(payload, offsets);
  append(payload, ids);
  append(payload, weights);
  append(payload, projection.exact);
  append(payload, projection.canonical);
  const ProjectionReport& r = projection.report;
  const json header{{"format", "retort-vocab-projection"},
                    {"version", kFormatVersion},
                    {"identity", identity_json(projection.identity)},
                    {"options", options_json(projection.options)},
                    {"nnz", ids.size()},
                    {"payload_bytes", payload.size()},
                    {"payload_fnv1a64", data::content_hash_hex(payload)},
                    {"report",
                     {{"student_tokenizer_ids", r.student_tokenizer_ids},
                      {"exact_rows", r.exact_rows},
                      {"reencoded_rows", r.reencoded_rows},
                      {"empty_rows", r.empty_rows},
                      {"exact_share", r.exact_share},
                      {"mean_pieces", r.mean_pieces},
                      {"build_seconds", r.build_seconds}}}};
  const std::string header_text = header.dump();
  std::string file(kMagic);
  const uint64_t header_size = header_text.size();
  file.append(reinterpret_cast<const char*>(&header_size), sizeof header_size);
  file += header_text;
  file += payload;
  file += kTrailerTag;
  file += data::content_hash_hex(file);
  if (path.has_parent_path()) fs::create_directories(path.parent_path());
  write_file_atomic(path, file);
}

StudentTeacherProjection load_projection(const fs::path& path, const ProjectionIdentity& expected,
                                         const ProjectionOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::string file = read_file(path);
  const auto damaged = [&](const std::string& why) {
    return InputError(
        fmt::format("the vocabulary projection '{}' is damaged ({}): {}", path.string(), why, fix_for(path)));
  };
  if (file.size() < kMagic.size() + 8 + kTrailerSize || std::string_view(file).substr(0, kMagic.size()) != kMagic) {
    throw InputError(fmt::format("'{}' is not a vocabulary projection file (it does not start with RTVPROJ): {}",
                                 path.string(), fix_for(path)));
  }
  const std::string_view body = std::string_view(file).substr(0, file.size() - 16);
  const std::string_view trailer = std::string_view(file).substr(file.size() - kTrailerSize);
  if (trailer.substr(0, kTrailerTag.size()) != kTrailerTag) throw damaged("its checksum trailer is missing");
  const std::string recorded(trailer.substr(kTrailerTag.size()));
  const std::string actual = data::content_hash_hex(body);
  if (recorded != actual) throw damaged(fmt::format("checksum {} recorded, {} computed", recorded, actual));

  std::string_view in = std::string_view(file).substr(kMagic.size(), file.size() - kMagic.size() - kTrailerSize);
  uint64_t header_size = 0;
  std::memcpy(&header_size, in.data(), sizeof header_size);
  in.remove_prefix(sizeof header_size);
  if (header_size > in.size()) throw damaged("its header runs past the end of the file");
  json header;
  try {
    header = json::parse(in.substr(0, header_size));
  } catch (const json::exception& error) {
    throw damaged(fmt::format("its header is not JSON: {}", error.what()));
  }
  in.remove_prefix(header_size);
  const int version = header.value("version", 0);
  RETORT_INPUT_CHECK(header.value("format", std::string()) == "retort-vocab-projection" && version == kFormatVersion,
                     "the vocabulary projection '{}' is of format version {}, this build reads version {}: {}",
                     path.string(), version, kFormatVersion, fix_for(path));
  const json want{{"identity", identity_json(expected)}, {"options", options_json(options)}};
  const std::string differ = differences(header, want);
  RETORT_INPUT_CHECK(differ.empty(),
                     "the vocabulary projection '{}' was made for another tokenizer pair, models or options ({}): "
                     "{} for this pair, or give the cache of this pair",
                     path.string(), differ, fix_for(path));

  const int64_t rows = expected.student_model_vocab;
  const auto nnz = header.at("nnz").get<int64_t>();
  const size_t payload_bytes = static_cast<size_t>(rows + 1) * 4 + static_cast<size_t>(nnz) * 8 + 2 * rows;
  if (nnz < 0 || header.at("payload_bytes").get<uint64_t>() != in.size() || in.size() != payload_bytes)
    throw damaged(
        fmt::format("its payload holds {} bytes, {} rows and {} entries need {}", in.size(), rows, nnz, payload_bytes));
  if (data::content_hash_hex(in) != header.at("payload_fnv1a64").get<std::string>())
    throw damaged("the payload's checksum differs");

  StudentTeacherProjection out;
  out.identity = expected;
  out.options = options;
  const std::vector<int32_t> offsets = take<int32_t>(in, static_cast<size_t>(rows) + 1);
  const std::vector<int32_t> ids = take<int32_t>(in, static_cast<size_t>(nnz));
  const std::vector<float> weights = take<float>(in, static_cast<size_t>(nnz));
  out.exact = take<uint8_t>(in, static_cast<size_t>(rows));
  out.canonical = take<uint8_t>(in, static_cast<size_t>(rows));
  // The matrix itself: rows in order, ids of the teacher's tokenizer, each row empty or summing to 1.
  if (offsets.front() != 0 || offsets.back() != nnz) throw damaged("its row offsets do not span the entries");
  for (int64_t s = 0; s < rows; ++s) {
    if (offsets[s + 1] < offsets[s]) throw damaged(fmt::format("row {} ends before it starts", s));
    double total = 0;
    for (int32_t e = offsets[s]; e < offsets[s + 1]; ++e) {
      if (ids[e] < 0 || ids[e] >= expected.teacher_tokenizer_vocab)
        throw damaged(fmt::format("row {} names teacher id {}", s, ids[e]));
      if (!std::isfinite(weights[e]) || weights[e] <= 0)
        throw damaged(fmt::format("row {} has weight {}", s, weights[e]));
      total += weights[e];
    }
    if (offsets[s + 1] > offsets[s] && std::abs(total - 1) > 1e-4)
      throw damaged(fmt::format("row {} sums to {}", s, total));
  }
  out.matrix.student_vocab = rows;
  out.matrix.teacher_vocab = expected.teacher_model_vocab;
  out.matrix.row_offsets = Tensor::from_ints(offsets, {rows + 1});
  out.matrix.teacher_ids = Tensor::from_ints(ids, {nnz});
  out.matrix.weights = Tensor::from_floats(weights, {nnz});
  const json& r = header.at("report");
  out.report.student_tokenizer_ids = r.at("student_tokenizer_ids").get<int64_t>();
  out.report.exact_rows = r.at("exact_rows").get<int64_t>();
  out.report.reencoded_rows = r.at("reencoded_rows").get<int64_t>();
  out.report.empty_rows = r.at("empty_rows").get<int64_t>();
  out.report.exact_share = r.at("exact_share").get<double>();
  out.report.mean_pieces = r.at("mean_pieces").get<double>();
  out.report.loaded = true;
  out.report.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

StudentTeacherProjection load_or_build_projection(const data::Tokenizer& student_tokenizer,
                                                  const data::Tokenizer& teacher_tokenizer, int64_t student_model_vocab,
                                                  int64_t teacher_model_vocab, const fs::path& path,
                                                  const ProjectionOptions& options, InvalidProjectionFile invalid) {
  const ProjectionIdentity identity =
      projection_identity(student_tokenizer, teacher_tokenizer, student_model_vocab, teacher_model_vocab);
  if (fs::exists(path)) {
    try {
      StudentTeacherProjection loaded = load_projection(path, identity, options);
      spdlog::info("vocabulary projection: {}", describe(loaded.report));
      return loaded;
    } catch (const InputError& error) {
      if (invalid == InvalidProjectionFile::kRefuse) throw;
      spdlog::warn("{}; rebuilding it", error.what());
    }
  }
  StudentTeacherProjection built =
      build_vocab_projection(student_tokenizer, teacher_tokenizer, student_model_vocab, teacher_model_vocab, options);
  save_projection(built, path);
  spdlog::info("vocabulary projection: {} -> {}", describe(built.report), path.string());
  return built;
}

}  // namespace retort::distill::xtoken
