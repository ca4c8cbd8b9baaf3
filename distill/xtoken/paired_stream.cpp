#include "distill/xtoken/paired_stream.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/data/content_hash.h"
#include "core/data/token_shard.h"
#include "core/io/atomic_file.h"
#include "core/util/error.h"
#include "distill/cache/topk_cache.h"

namespace retort::distill::xtoken {

namespace fs = std::filesystem;

namespace {

constexpr int kPairedStreamVersion = 1;

// A short, printable excerpt of text bytes for messages.
std::string excerpt(std::string_view text, size_t at) {
  const size_t begin = at > 20 ? at - 20 : 0;
  std::string out;
  for (unsigned char c : text.substr(begin, 40)) {
    if (c == '\n')
      out += "\\n";
    else if (c < 0x20 || c == 0x7F)
      out += fmt::format("\\x{:02x}", c);
    else
      out += static_cast<char>(c);
  }
  return "\"" + out + "\"";
}

std::vector<int64_t> document_starts(std::span<const int32_t> tokens, int32_t eos) {
  std::vector<int64_t> starts{0};
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == eos && i + 1 < tokens.size()) starts.push_back(static_cast<int64_t>(i + 1));
  starts.push_back(static_cast<int64_t>(tokens.size()));
  if (tokens.empty()) starts.pop_back();
  return starts;
}

std::string offsets_bytes(const std::vector<int64_t>& offsets) {
  std::string bytes(offsets.size() * sizeof(int64_t), '\0');
  std::memcpy(bytes.data(), offsets.data(), bytes.size());  // little-endian hosts only, as the shards
  return bytes;
}

std::vector<int64_t> read_offsets(const fs::path& path, size_t count) {
  const std::string bytes = read_file(path);
  RETORT_INPUT_CHECK(bytes.size() == count * sizeof(int64_t),
                     "{} holds {} bytes, not the {} of {} offsets: delete its folder to make the paired stream again",
                     path.string(), bytes.size(), count * sizeof(int64_t), count);
  std::vector<int64_t> offsets(count);
  std::memcpy(offsets.data(), bytes.data(), bytes.size());
  return offsets;
}

std::vector<int32_t> read_stream(const std::vector<fs::path>& shards, int64_t vocab) {
  std::vector<int32_t> tokens;
  for (const fs::path& path : shards) {
    const data::TokenShard shard = data::TokenShard::open(path, vocab);
    const size_t at = tokens.size();
    tokens.resize(at + static_cast<size_t>(shard.size()));
    shard.copy_to(0, std::span<int32_t>(tokens).subspan(at));
  }
  return tokens;
}

nlohmann::json identity_json(const DatasetIdentity& id) {
  return {{"tokens", id.tokens}, {"hash", id.hash}};
}

// The manifest a folder made now from this request would have, without its files.
nlohmann::json expected_manifest(const PairedStreamRequest& r, const DatasetIdentity& train,
                                 const DatasetIdentity& val) {
  return {{"version", kPairedStreamVersion},
          {"student_tokenizer", r.student->fingerprint()},
          {"teacher_tokenizer", r.teacher->fingerprint()},
          {"student_vocab", r.student_vocab},
          {"teacher_vocab", r.teacher->vocab_size()},
          {"student_train", identity_json(train)},
          {"student_val", identity_json(val)}};
}

struct SplitFiles {
  std::string teacher_shard, student_offsets, teacher_offsets;
};
SplitFiles files_of(const std::string& split) {
  return {"teacher_" + split + "_000.bin", "student_" + split + ".offsets", "teacher_" + split + ".offsets"};
}

// Whether the folder's manifest is `expected` with every file of the right size and hash; why not, for the log.
std::string why_not_reusable(const fs::path& dir, const nlohmann::json& expected) {
  const fs::path manifest_path = dir / kPairedStreamManifest;
  if (!fs::exists(manifest_path)) return "";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(read_file(manifest_path));
  } catch (const nlohmann::json::exception&) {
    return "its paired.json is not valid JSON";
  }
  for (const auto& [key, value] : expected.items())
    if (!manifest.contains(key) || manifest.at(key) != value)
      return fmt::format("it was made with another {} ({} there, {} now)", key,
                         manifest.contains(key) ? manifest.at(key).dump() : "none", value.dump());
  if (!manifest.contains("files")) return "its paired.json lists no files";
  for (const auto& [name, info] : manifest.at("files").items()) {
    const fs::path file = dir / name;
    if (!fs::exists(file)) return fmt::format("{} is missing", name);
    if (static_cast<int64_t>(fs::file_size(file)) != info.at("size").get<int64_t>())
      return fmt::format("{} has another size than recorded", name);
    if (data::file_content_hash_hex(file) != info.at("hash").get<std::string>())
      return fmt::format("{} has another content hash than recorded (damaged)", name);
  }
  return {};
}

void write_split(const fs::path& dir, const std::string& split, PairedSplit& s, int64_t teacher_vocab,
                 nlohmann::json& files) {
  const SplitFiles names = files_of(split);
  write_file_atomic(dir / names.student_offsets, offsets_bytes(s.student_offsets));
  write_file_atomic(dir / names.teacher_offsets, offsets_bytes(s.teacher_offsets));
  s.teacher_shard = dir / names.teacher_shard;
  data::write_token_shard(s.teacher_shard, s.teacher_tokens, teacher_vocab);
  for (const std::string& name : {names.teacher_shard, names.student_offsets, names.teacher_offsets})
    files[name] = {{"size", static_cast<int64_t>(fs::file_size(dir / name))},
                   {"hash", data::file_content_hash_hex(dir / name)}};
}

PairedSplit read_split(const fs::path& dir, const std::string& split, std::vector<int32_t> student_tokens,
                       int32_t student_eos, int32_t teacher_eos, int64_t teacher_vocab) {
  const SplitFiles names = files_of(split);
  PairedSplit s;
  s.student_tokens = std::move(student_tokens);
  s.teacher_shard = dir / names.teacher_shard;
  s.teacher_tokens = read_stream({s.teacher_shard}, teacher_vocab);
  s.student_offsets = read_offsets(dir / names.student_offsets, s.student_tokens.size() + 1);
  s.teacher_offsets = read_offsets(dir / names.teacher_offsets, s.teacher_tokens.size() + 1);
  s.student_documents = document_starts(s.student_tokens, student_eos);
  s.teacher_documents = document_starts(s.teacher_tokens, teacher_eos);
  RETORT_INPUT_CHECK(
      s.student_documents.size() == s.teacher_documents.size() && s.student_offsets.back() == s.teacher_offsets.back(),
      "the paired stream in '{}' ({} split) has {} student and {} teacher documents, {} and {} bytes: "
      "delete the folder to make it again",
      dir.string(), split, s.student_documents.size(), s.teacher_documents.size(), s.student_offsets.back(),
      s.teacher_offsets.back());
  return s;
}

}  // namespace

TokenTexts token_texts(const data::Tokenizer& tokenizer) {
  TokenTexts t;
  const auto vocab = static_cast<size_t>(tokenizer.vocab_size());
  t.bytes.resize(vocab);
  t.roles.assign(vocab, SpecialRole::kNone);
  t.eos_id = tokenizer.eos_id();
  t.name = fmt::format("{} '{}'", tokenizer.kind(), tokenizer.model_path().string());
  for (size_t id = 0; id < vocab; ++id) {
    const auto i = static_cast<int32_t>(id);
    if (i == t.eos_id)
      t.roles[id] = SpecialRole::kEos;
    else if (tokenizer.is_special(i))
      t.roles[id] = SpecialRole::kOther;
    else
      t.bytes[id] = tokenizer.token_bytes(i);
  }
  return t;
}

PairedSplit pair_token_stream(std::span<const int32_t> student_tokens, const TokenTexts& student,
                              const data::Tokenizer& teacher, const TokenTexts& teacher_texts,
                              const std::string& split) {
  PairedSplit s;
  s.student_tokens.assign(student_tokens.begin(), student_tokens.end());
  s.student_offsets.reserve(student_tokens.size() + 1);
  s.student_offsets.push_back(0);
  s.teacher_offsets.push_back(0);
  std::string text, rebuilt;
  int64_t byte = 0, document = 0;
  size_t begin = 0;
  while (begin < student_tokens.size()) {
    size_t end = begin;  // one past the document's last text token
    while (end < student_tokens.size() && student_tokens[end] != student.eos_id) ++end;
    const bool has_eos = end < student_tokens.size();
    s.student_documents.push_back(static_cast<int64_t>(begin));
    s.teacher_documents.push_back(static_cast<int64_t>(s.teacher_tokens.size()));
    text.clear();
    for (size_t i = begin; i < end; ++i) {
      const auto id = static_cast<size_t>(student_tokens[i]);
      RETORT_CHECK(id < student.bytes.size(), "student token {} outside the tokenizer's {} ids", id,
                   student.bytes.size());
      text += student.bytes[id];
      s.student_offsets.push_back(byte + static_cast<int64_t>(text.size()));
    }
    if (has_eos) s.student_offsets.push_back(byte + static_cast<int64_t>(text.size()));

    const std::vector<int32_t> ids = teacher.encode(text);
    rebuilt.clear();
    for (int32_t id : ids) {
      rebuilt += teacher_texts.bytes[static_cast<size_t>(id)];
      s.teacher_tokens.push_back(id);
      s.teacher_offsets.push_back(byte + static_cast<int64_t>(rebuilt.size()));
    }
    if (rebuilt != text) {
      const size_t at = static_cast<size_t>(
          std::mismatch(text.begin(), text.end(), rebuilt.begin(), rebuilt.end()).first - text.begin());
      throw InputError(fmt::format(
          "the teacher tokenizer {} does not give back the text of document {} of the {} split: at byte {} the "
          "text reads {} and the teacher's tokens read {}. Cross-tokenizer distillation needs two tokenizers that "
          "encode any text without loss: give a teacher tokenizer with byte fallback (a SentencePiece model trained "
          "with byte_fallback, or a byte-level BPE tokenizer.json) and identity normalisation",
          teacher_texts.name, document, split, at, excerpt(text, at), excerpt(rebuilt, at)));
    }
    if (has_eos) {
      s.teacher_tokens.push_back(teacher_texts.eos_id);
      s.teacher_offsets.push_back(byte + static_cast<int64_t>(text.size()));
    }
    byte += static_cast<int64_t>(text.size());
    begin = has_eos ? end + 1 : end;
    ++document;
  }
  s.student_documents.push_back(static_cast<int64_t>(student_tokens.size()));
  s.teacher_documents.push_back(static_cast<int64_t>(s.teacher_tokens.size()));
  if (student_tokens.empty()) {
    s.student_documents.pop_back();
    s.teacher_documents.pop_back();
  }
  return s;
}

std::vector<fs::path> PairedStream::teacher_val_shards() const {
  if (val.teacher_shard.empty()) return {};
  return {val.teacher_shard};
}

std::vector<std::string> paired_stream_files() {
  std::vector<std::string> names{kPairedStreamManifest};
  for (const std::string split : {"train", "val"}) {
    const SplitFiles f = files_of(split);
    names.insert(names.end(), {f.teacher_shard, f.student_offsets, f.teacher_offsets});
  }
  return names;
}

PairedStream load_or_build_paired_stream(const PairedStreamRequest& r) {
  RETORT_CHECK(r.student && r.teacher, "load_or_build_paired_stream: both tokenizers are required");
  RETORT_INPUT_CHECK(!r.student_train_shards.empty(),
                     "the paired stream needs the student's training shards; prepare the student's data first");
  PairedStream out;
  out.directory = r.directory;
  out.student_fingerprint = r.student->fingerprint();
  out.teacher_fingerprint = r.teacher->fingerprint();
  out.teacher_vocab = r.teacher->vocab_size();
  std::vector<int32_t> train_tokens = read_stream(r.student_train_shards, r.student_vocab);
  std::vector<int32_t> val_tokens = read_stream(r.student_val_shards, r.student_vocab);
  const nlohmann::json expected = expected_manifest(r, dataset_identity(train_tokens), dataset_identity(val_tokens));
  const bool has_val = !r.student_val_shards.empty();

  const std::string why = why_not_reusable(r.directory, expected);
  if (fs::exists(r.directory / kPairedStreamManifest) && why.empty()) {
    out.train = read_split(r.directory, "train", std::move(train_tokens), r.student->eos_id(), r.teacher->eos_id(),
                           out.teacher_vocab);
    if (has_val)
      out.val = read_split(r.directory, "val", std::move(val_tokens), r.student->eos_id(), r.teacher->eos_id(),
                           out.teacher_vocab);
    out.reused = true;
    spdlog::info("xtoken: paired token streams in '{}' reused ({} student / {} teacher training tokens)",
                 r.directory.string(), out.train.student_tokens.size(), out.train.teacher_tokens.size());
    return out;
  }
  if (!why.empty()) spdlog::info("xtoken: the paired stream in '{}' is made again: {}", r.directory.string(), why);

  const auto started = std::chrono::steady_clock::now();
  const TokenTexts student = token_texts(*r.student), teacher = token_texts(*r.teacher);
  fs::create_directories(r.directory);
  fs::remove(r.directory / kPairedStreamManifest);  // the folder is incomplete until the manifest is back
  nlohmann::json manifest = expected;
  nlohmann::json& files = manifest["files"] = nlohmann::json::object();
  out.train = pair_token_stream(train_tokens, student, *r.teacher, teacher, "train");
  write_split(r.directory, "train", out.train, out.teacher_vocab, files);
  if (has_val) {
    out.val = pair_token_stream(val_tokens, student, *r.teacher, teacher, "val");
    write_split(r.directory, "val", out.val, out.teacher_vocab, files);
  }
  manifest["train_bytes"] = out.train.bytes();
  manifest["train_teacher_tokens"] = out.train.teacher_tokens.size();
  manifest["val_bytes"] = out.val.bytes();
  manifest["val_teacher_tokens"] = out.val.teacher_tokens.size();
  write_text_atomic(r.directory / kPairedStreamManifest, manifest.dump(2) + "\n");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  spdlog::info(
      "xtoken: paired token streams in '{}': {} bytes of training text, {} student / {} teacher tokens ({:.2f} / "
      "{:.2f} bytes per token), {} validation bytes; made in {:.1f} s",
      r.directory.string(), out.train.bytes(), out.train.student_tokens.size(), out.train.teacher_tokens.size(),
      static_cast<double>(out.train.bytes()) /
          std::max<double>(1.0, static_cast<double>(out.train.student_tokens.size())),
      static_cast<double>(out.train.bytes()) /
          std::max<double>(1.0, static_cast<double>(out.train.teacher_tokens.size())),
      out.val.bytes(), seconds);
  return out;
}

}  // namespace retort::distill::xtoken
