#include "distill/xtoken/vocab_projection.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/util/error.h"

namespace retort::distill::xtoken {

namespace {

struct Entry {
  int32_t teacher_id;
  double weight;
};

// The bytes -> ids of one side's tokens that stand for text, and which of several ids with the same bytes its
// encoder writes for them.
struct BytesIndex {
  std::unordered_map<std::string, std::vector<int32_t>> ids;
  std::unordered_map<std::string, int32_t> canonical;
};

bool valid_utf8(std::string_view s) {
  for (size_t at = 0; at < s.size();) {
    const auto c = static_cast<unsigned char>(s[at]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) {
      ++at;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      need = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      need = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      need = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    for (size_t i = 1; i <= need; ++i) {
      if (at + i >= s.size()) return false;
      const auto b = static_cast<unsigned char>(s[at + i]);
      if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xBF)) return false;
    }
    at += need + 1;
  }
  return true;
}

// Of several ids standing for `bytes`, the one the tokenizer's encoder writes for them; where the encoder writes
// something else (or the bytes are no valid text), the highest id, so the choice is still deterministic
// (SentencePiece numbers its byte pieces first, so that is the text piece).
int32_t canonical_of(const data::Tokenizer& tokenizer, const std::string& bytes, const std::vector<int32_t>& ids) {
  if (valid_utf8(bytes)) {
    const std::vector<int32_t> encoded = tokenizer.encode(bytes);
    if (encoded.size() == 1 && std::find(ids.begin(), ids.end(), encoded[0]) != ids.end()) return encoded[0];
  }
  return *std::max_element(ids.begin(), ids.end());
}

BytesIndex index_by_bytes(const data::Tokenizer& tokenizer) {
  BytesIndex index;
  index.ids.reserve(static_cast<size_t>(tokenizer.vocab_size()));
  for (int32_t id = 0; id < static_cast<int32_t>(tokenizer.vocab_size()); ++id) {
    if (tokenizer.is_special(id)) continue;
    std::string bytes = tokenizer.token_bytes(id);
    if (!bytes.empty()) index.ids[std::move(bytes)].push_back(id);
  }
  for (const auto& [bytes, ids] : index.ids) {
    if (ids.size() > 1) index.canonical[bytes] = canonical_of(tokenizer, bytes, ids);
  }
  return index;
}

int32_t canonical_id(const BytesIndex& index, const std::string& bytes, const std::vector<int32_t>& ids) {
  if (ids.size() == 1) return ids[0];
  return index.canonical.at(bytes);
}

// The teacher's pieces for bytes that no teacher token stands for exactly: its encoding of each stretch of valid
// text, and the single-byte token of each byte that is no valid text. Special tokens the encoder finds in the text
// (a student piece reading "<|im_end|>") stand for no bytes and are left out.
std::vector<int32_t> teacher_pieces(const data::Tokenizer& teacher, const BytesIndex& teacher_index,
                                    const std::string& bytes) {
  std::vector<int32_t> pieces;
  const auto add_text = [&](std::string_view text) {
    if (text.empty()) return;
    for (const int32_t id : teacher.encode(text)) {
      if (!teacher.is_special(id)) pieces.push_back(id);
    }
  };
  if (valid_utf8(bytes)) {
    add_text(bytes);
    return pieces;
  }
  // Cut into the longest valid stretches and the bytes between them.
  size_t start = 0;
  for (size_t at = 0; at < bytes.size();) {
    size_t length = 0;
    for (size_t n = 1; n <= 4 && at + n <= bytes.size(); ++n) {
      if (valid_utf8(std::string_view(bytes).substr(at, n))) {
        length = n;
        break;
      }
    }
    if (length > 0) {
      at += length;
      continue;
    }
    add_text(std::string_view(bytes).substr(start, at - start));
    const auto it = teacher_index.ids.find(bytes.substr(at, 1));
    if (it != teacher_index.ids.end()) pieces.push_back(canonical_id(teacher_index, it->first, it->second));
    start = ++at;
  }
  add_text(std::string_view(bytes).substr(start));
  return pieces;
}

// Piece i weighs 0.9 * decay^i; a teacher id listed twice adds up; the row sums to 1.
std::vector<Entry> weighted_row(const std::vector<int32_t>& pieces, const ProjectionOptions& options) {
  std::vector<Entry> row;
  double weight = 0.9;
  for (size_t i = 0; i < pieces.size() && i < static_cast<size_t>(options.max_pieces); ++i, weight *= options.decay) {
    auto it = std::find_if(row.begin(), row.end(), [&](const Entry& e) { return e.teacher_id == pieces[i]; });
    if (it == row.end()) {
      row.push_back({pieces[i], weight});
    } else {
      it->weight += weight;
    }
  }
  double total = 0;
  for (const Entry& e : row) total += e.weight;
  for (Entry& e : row) e.weight /= total;
  return row;
}

// Runs body(id) for ids [0, count) on the machine's cores: the teacher encodes of a large vocabulary are the
// build's cost, and a const Tokenizer encodes from several threads.
template <typename Body>
void parallel_for(int64_t count, const Body& body) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 16);
  if (threads == 1 || count < 4096) {
    for (int64_t i = 0; i < count; ++i) body(i);
    return;
  }
  std::vector<std::thread> workers;
  std::exception_ptr failure;
  std::mutex failure_mutex;
  for (int64_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        for (int64_t i = t; i < count; i += threads) body(i);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
    });
  }
  for (std::thread& worker : workers) worker.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

ProjectionIdentity projection_identity(const data::Tokenizer& student, const data::Tokenizer& teacher,
                                       int64_t student_model_vocab, int64_t teacher_model_vocab) {
  RETORT_INPUT_CHECK(student_model_vocab >= student.vocab_size(),
                     "the student model's vocabulary ({} ids) is smaller than its tokenizer's '{}' ({} ids): the "
                     "model cannot score every token; give the student a vocabulary of at least {}",
                     student_model_vocab, student.model_path().string(), student.vocab_size(), student.vocab_size());
  RETORT_INPUT_CHECK(teacher_model_vocab >= teacher.vocab_size(),
                     "the teacher model's vocabulary ({} ids) is smaller than its tokenizer's '{}' ({} ids): the "
                     "model cannot score every token; give the teacher a vocabulary of at least {}",
                     teacher_model_vocab, teacher.model_path().string(), teacher.vocab_size(), teacher.vocab_size());
  return {student.fingerprint(), teacher.fingerprint(), student.vocab_size(),
          teacher.vocab_size(),  student_model_vocab,   teacher_model_vocab};
}

StudentTeacherProjection build_vocab_projection(const data::Tokenizer& student, const data::Tokenizer& teacher,
                                                int64_t student_model_vocab, int64_t teacher_model_vocab,
                                                const ProjectionOptions& options) {
  RETORT_INPUT_CHECK(options.max_pieces >= 1 && options.decay > 0 && options.decay <= 1,
                     "vocabulary projection options: max_pieces {} and decay {} must be >= 1 and in (0, 1]",
                     options.max_pieces, options.decay);
  const auto start = std::chrono::steady_clock::now();
  StudentTeacherProjection out;
  out.identity = projection_identity(student, teacher, student_model_vocab, teacher_model_vocab);
  out.options = options;

  const BytesIndex teacher_index = index_by_bytes(teacher);
  const BytesIndex student_index = index_by_bytes(student);
  std::unordered_map<std::string, int32_t> teacher_special_by_text;
  for (int32_t id = 0; id < static_cast<int32_t>(teacher.vocab_size()); ++id) {
    if (teacher.is_special(id)) teacher_special_by_text.emplace(teacher.piece(id), id);
  }

  const int64_t tokenizer_rows = student.vocab_size();
  std::vector<std::vector<Entry>> rows(static_cast<size_t>(student_model_vocab));
  out.exact.assign(static_cast<size_t>(student_model_vocab), 0);
  out.canonical.assign(static_cast<size_t>(student_model_vocab), 1);
  parallel_for(tokenizer_rows, [&](int64_t row) {
    const auto s = static_cast<int32_t>(row);
    auto& entries = rows[static_cast<size_t>(row)];
    if (student.is_special(s)) {
      // By role: end of document to end of document, else a teacher special of the same text.
      int32_t target = -1;
      if (s == student.eos_id()) {
        target = teacher.eos_id();
      } else if (const auto it = teacher_special_by_text.find(student.piece(s)); it != teacher_special_by_text.end()) {
        target = it->second;
      }
      if (target >= 0) {
        entries.push_back({target, 1.0});
        out.exact[static_cast<size_t>(row)] = 1;
      }
      return;
    }
    const std::string bytes = student.token_bytes(s);
    if (bytes.empty()) return;
    if (const auto it = student_index.ids.find(bytes); it != student_index.ids.end() && it->second.size() > 1) {
      out.canonical[static_cast<size_t>(row)] = canonical_id(student_index, bytes, it->second) == s ? 1 : 0;
    }
    if (const auto it = teacher_index.ids.find(bytes); it != teacher_index.ids.end()) {
      entries.push_back({canonical_id(teacher_index, bytes, it->second), 1.0});
      out.exact[static_cast<size_t>(row)] = 1;
      return;
    }
    entries = weighted_row(teacher_pieces(teacher, teacher_index, bytes), options);
  });

  if (options.reverse_pass) {
    for (const auto& [bytes, teacher_ids] : teacher_index.ids) {
      const auto it = student_index.ids.find(bytes);
      if (it == student_index.ids.end()) continue;
      for (const int32_t s : it->second) {
        auto& entries = rows[static_cast<size_t>(s)];
        bool changed = false;
        for (const int32_t t : teacher_ids) {
          const bool listed =
              std::any_of(entries.begin(), entries.end(), [&](const Entry& e) { return e.teacher_id == t; });
          if (!listed) entries.push_back({t, 1.0}), changed = true;
        }
        if (!changed) continue;
        // The largest weights first (lower teacher id among equals), cut, normalised again.
        std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
          return a.weight != b.weight ? a.weight > b.weight : a.teacher_id < b.teacher_id;
        });
        if (entries.size() > static_cast<size_t>(options.max_pieces)) entries.resize(options.max_pieces);
        double total = 0;
        for (const Entry& e : entries) total += e.weight;
        for (Entry& e : entries) e.weight /= total;
      }
    }
  }

  std::vector<int32_t> offsets(static_cast<size_t>(student_model_vocab) + 1, 0), ids;
  std::vector<float> weights;
  ProjectionReport& report = out.report;
  report.student_tokenizer_ids = tokenizer_rows;
  for (size_t s = 0; s < rows.size(); ++s) {
    for (const Entry& e : rows[s]) {
      ids.push_back(e.teacher_id);
      weights.push_back(static_cast<float>(e.weight));
    }
    offsets[s + 1] = static_cast<int32_t>(ids.size());
    if (rows[s].empty()) {
      ++report.empty_rows;
    } else if (out.exact[s]) {
      ++report.exact_rows;
    } else {
      ++report.reencoded_rows;
    }
  }
  const int64_t filled = student_model_vocab - report.empty_rows;
  report.exact_share = tokenizer_rows > 0 ? static_cast<double>(report.exact_rows) / tokenizer_rows : 0;
  report.mean_pieces = filled > 0 ? static_cast<double>(ids.size()) / filled : 0;
  const auto nnz = static_cast<int64_t>(ids.size());
  out.matrix.student_vocab = student_model_vocab;
  out.matrix.teacher_vocab = teacher_model_vocab;
  out.matrix.row_offsets = Tensor::from_ints(offsets, {student_model_vocab + 1});
  out.matrix.teacher_ids = Tensor::from_ints(ids, {nnz});
  out.matrix.weights = Tensor::from_floats(weights, {nnz});
  report.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

std::string describe(const ProjectionReport& report) {
  return fmt::format(
      "{} of {} student ids ({:.1f}%) map exactly, {} through the teacher's pieces, {} to nothing; {:.2f} teacher ids "
      "per mapped row; {} in {:.2f} s",
      report.exact_rows, report.student_tokenizer_ids, 100 * report.exact_share, report.reencoded_rows,
      report.empty_rows, report.mean_pieces, report.loaded ? "read" : "built", report.build_seconds);
}

}  // namespace retort::distill::xtoken
