// The pieces of the tokenizer.json reader on small hand-made files: GPT-2's byte map, merge ranks (both merge
// forms), ignore_merges, added tokens (longest match, lstrip/rstrip, special), the post-processor template, offsets,
// decoding, ill-formed UTF-8, and the errors for what it does not read.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/data/byte_level_bpe.h"
#include "core/data/tokenizer.h"
#include "core/util/error.h"
#include "tests/test_support.h"

namespace retort::data {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using ::retort::testing::message_of;
using ::retort::testing::TempFolder;
using ::retort::testing::write_bytes;

// GPT-2's table written out: the printable bytes keep their code point, the other 68 take 256.. in byte order.
std::string stand_in(int byte) {
  static const std::vector<int> printable = [] {
    std::vector<int> out;
    for (int b = 33; b <= 126; ++b) out.push_back(b);
    for (int b = 161; b <= 172; ++b) out.push_back(b);
    for (int b = 174; b <= 255; ++b) out.push_back(b);
    return out;
  }();
  int code = -1, next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool keep = std::find(printable.begin(), printable.end(), b) != printable.end();
    if (b == byte) code = keep ? b : next;
    if (!keep) ++next;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// Ids 0..255 are the bytes (id = byte); merges h e -> he (256), l l -> ll (257), e l -> el (258), he ll -> hell (259),
// hell o -> hello (260), Ġ w -> Ġw (261); "xyz" (262) is in the vocabulary with no merge leading to it.
json tiny_file(bool pair_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[stand_in(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges{{"h", "e"},   {"l", "l"},    {"e", "l"},
                                                                {"he", "ll"}, {"hell", "o"}, {stand_in(' '), "w"}};
  int id = 256;
  json merge_list = json::array();
  for (const auto& [a, b] : merges) {
    vocab[a + b] = id++;
    merge_list.push_back(pair_merges ? json::array({a, b}) : json(a + " " + b));
  }
  vocab["xyz"] = 262;
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens",
               json::array({json{{"id", 263}, {"content", "<|endoftext|>"}, {"special", true}, {"normalized", false}},
                            json{{"id", 264}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
                            json{{"id", 265}, {"content", "<think>"}, {"special", false}, {"normalized", false}}})},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}}};
}

ByteLevelBpe make(const json& file) {
  return ByteLevelBpe(file.dump(), "test tokenizer.json");
}

TEST(ByteLevelBpe, ByteMapIsGpt2s) {
  const auto& table = byte_to_unicode();
  EXPECT_EQ(table[' '], U'\u0120');   // Ġ
  EXPECT_EQ(table['\n'], U'\u010A');  // Ċ
  EXPECT_EQ(table['A'], U'A');
  EXPECT_EQ(table[0], char32_t{256});
  EXPECT_EQ(table[127], char32_t{289});
  EXPECT_EQ(table[173], char32_t{323});  // Ń, the soft hyphen's stand-in
  EXPECT_EQ(table[255], char32_t{255});
}

TEST(ByteLevelBpe, MergesAreRankedByTheirLineAndAppliedLowestRankFirst) {
  const ByteLevelBpe bpe = make(tiny_file());
  EXPECT_EQ(bpe.merge_of('h', 'e'), (std::pair<int32_t, int32_t>{0, 256}));
  EXPECT_EQ(bpe.merge_of('l', 'l'), (std::pair<int32_t, int32_t>{1, 257}));
  EXPECT_EQ(bpe.merge_of(256, 257), (std::pair<int32_t, int32_t>{3, 259}));
  EXPECT_FALSE(bpe.merge_of('l', 'e').has_value());
  EXPECT_EQ(bpe.encode("hello"), (std::vector<int32_t>{260}));
  // "ell": l l (rank 1) wins over e l (rank 2), leaving e + ll.
  EXPECT_EQ(bpe.encode("ell"), (std::vector<int32_t>{'e', 257}));
  // "elo": only e l applies.
  EXPECT_EQ(bpe.encode("elo"), (std::vector<int32_t>{258, 'o'}));
  // GPT-2's pattern splits " world" off: Ġw merges, then the bytes.
  EXPECT_EQ(bpe.encode("hello world"), (std::vector<int32_t>{260, 261, 'o', 'r', 'l', 'd'}));
  // A long word takes the same merges as its pieces (and the word cache gives the same answer twice).
  std::string long_word;
  std::vector<int32_t> expected;
  for (int i = 0; i < 300; ++i) long_word += "hello", expected.push_back(260);
  EXPECT_EQ(bpe.encode(long_word), expected);
  EXPECT_EQ(bpe.encode(long_word), expected);
}

TEST(ByteLevelBpe, PairMergesReadAsStringMerges) {
  const ByteLevelBpe strings = make(tiny_file(false)), pairs = make(tiny_file(true));
  for (const char* text : {"hello world", "ell", "shell hello"}) EXPECT_EQ(strings.encode(text), pairs.encode(text));
  EXPECT_EQ(pairs.merge_of(256, 257), (std::pair<int32_t, int32_t>{3, 259}));
}

TEST(ByteLevelBpe, IgnoreMergesTakesAWordInTheVocabularyWhole) {
  json file = tiny_file();
  EXPECT_EQ(make(file).encode("xyz"), (std::vector<int32_t>{'x', 'y', 'z'}));
  file["model"]["ignore_merges"] = true;
  EXPECT_EQ(make(file).encode("xyz"), (std::vector<int32_t>{262}));
  EXPECT_EQ(make(file).encode("xyzq"), (std::vector<int32_t>{'x', 'y', 'z', 'q'}));
}

TEST(ByteLevelBpe, AddedTokensAreSplitOutFirstLongestMatchWithOffsets) {
  const ByteLevelBpe bpe = make(tiny_file());
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
  bpe.encode("hello<|endoftext|>é<|end|><think>", false, ids, &offsets);
  EXPECT_EQ(ids, (std::vector<int32_t>{260, 263, 0xC3, 0xA9, 264, 265}));
  EXPECT_EQ(offsets, (std::vector<CharOffsets>{{0, 5}, {5, 18}, {18, 19}, {18, 19}, {19, 26}, {26, 33}}));
  // Special tokens decode to their text unless skipped; "<think>" is not special.
  EXPECT_EQ(bpe.decode(ids, false), "hello<|endoftext|>é<|end|><think>");
  EXPECT_EQ(bpe.decode(ids, true), "helloé<think>");
}

TEST(ByteLevelBpe, LstripAndRstripTakeTheWhitespaceAroundAnAddedToken) {
  json file = tiny_file();
  file["added_tokens"][1]["lstrip"] = true;
  file["added_tokens"][1]["rstrip"] = true;
  const ByteLevelBpe bpe = make(file);
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
  bpe.encode("he  <|end|> \nhe", false, ids, &offsets);
  EXPECT_EQ(ids, (std::vector<int32_t>{256, 264, 256}));
  EXPECT_EQ(offsets, (std::vector<CharOffsets>{{0, 2}, {2, 13}, {13, 15}}));
}

TEST(ByteLevelBpe, TemplatePostProcessorAddsItsTokensOnlyWhenAsked) {
  json file = tiny_file();
  file["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       json::array({json{{"type", "ByteLevel"}, {"trim_offsets", false}},
                    json{{"type", "TemplateProcessing"},
                         {"single", json::array({json{{"SpecialToken", {{"id", "<|end|>"}, {"type_id", 0}}}},
                                                 json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<|end|>", {{"id", "<|end|>"}, {"ids", {264}}}}}}}})}};
  const ByteLevelBpe bpe = make(file);
  EXPECT_EQ(bpe.encode("hello", false), (std::vector<int32_t>{260}));
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
  bpe.encode("hello", true, ids, &offsets);
  EXPECT_EQ(ids, (std::vector<int32_t>{264, 260}));
  EXPECT_EQ(offsets, (std::vector<CharOffsets>{{0, 0}, {0, 5}}));
}

TEST(ByteLevelBpe, ByteLevelTrimOffsetsLeavesTheSpaceOutOfATokensOffsets) {
  json file = tiny_file();
  file["post_processor"] = {{"type", "ByteLevel"}, {"trim_offsets", true}, {"add_prefix_space", false}};
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
  make(file).encode("hello world", false, ids, &offsets);
  ASSERT_EQ(ids.size(), 6u);
  EXPECT_EQ(offsets[1], (CharOffsets{6, 7}));  // Ġw covers " w"; trimmed to "w"
}

TEST(ByteLevelBpe, IllFormedUtf8IsReadAsReplacementCharacters) {
  EXPECT_EQ(utf8_with_replacement("a\xFF"
                                  "b\xE2\x82"),
            "a\xEF\xBF\xBD"
            "b\xEF\xBF\xBD");
  EXPECT_EQ(utf8_with_replacement("ok é €"), "ok é €");
  const ByteLevelBpe bpe = make(tiny_file());
  EXPECT_EQ(bpe.encode("h\xFF"), bpe.encode("h\xEF\xBF\xBD"));
}

TEST(ByteLevelBpe, NfcNormalizerComposesAndOffsetsPointAtTheSourceCharacters) {
  json file = tiny_file();
  file["normalizer"] = {{"type", "NFC"}};
  std::vector<int32_t> ids;
  std::vector<CharOffsets> offsets;
  make(file).encode("e\xCC\x81x", false, ids, &offsets);  // e + U+0301 -> é (C3 A9)
  EXPECT_EQ(ids, (std::vector<int32_t>{0xC3, 0xA9, 'x'}));
  // As Hugging Face aligns a composition: é keeps the span of its first source character.
  EXPECT_EQ(offsets, (std::vector<CharOffsets>{{0, 1}, {0, 1}, {2, 3}}));
}

TEST(ByteLevelBpe, WhatItDoesNotReadIsAnInputErrorNamingTheKeyAndValue) {
  const auto error_for = [](const std::function<void(json&)>& edit) {
    json file = tiny_file();
    edit(file);
    return message_of([&] { make(file); });
  };
  std::string message = error_for([](json& f) { f["pre_tokenizer"] = {{"type", "Whitespace"}}; });
  EXPECT_NE(message.find("pre_tokenizer.type"), std::string::npos) << message;
  EXPECT_NE(message.find("Whitespace"), std::string::npos) << message;
  message = error_for([](json& f) {
    f["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         json::array(
             {json{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
              json{{"type", "ByteLevel"}, {"use_regex", false}}})}};
  });
  EXPECT_NE(message.find("pre_tokenizer.pretokenizers[0].behavior"), std::string::npos) << message;
  EXPECT_NE(message.find("Removed"), std::string::npos) << message;
  message = error_for([](json& f) { f["normalizer"] = {{"type", "Lowercase"}}; });
  EXPECT_NE(message.find("normalizer.type = \"Lowercase\""), std::string::npos) << message;
  message = error_for([](json& f) { f["model"]["type"] = "WordPiece"; });
  EXPECT_NE(message.find("model.type = \"WordPiece\""), std::string::npos) << message;
  message = error_for([](json& f) { f["decoder"] = {{"type", "Metaspace"}}; });
  EXPECT_NE(message.find("decoder"), std::string::npos) << message;
  message = error_for([](json& f) { f["post_processor"] = {{"type", "BertProcessing"}}; });
  EXPECT_NE(message.find("post_processor.type = \"BertProcessing\""), std::string::npos) << message;
  message = error_for([](json& f) { f["truncation"] = {{"max_length", 8}}; });
  EXPECT_NE(message.find("truncation"), std::string::npos) << message;
  message = error_for([](json& f) { f["model"]["merges"].push_back("q zz"); });
  EXPECT_NE(message.find("model.merges[6]"), std::string::npos) << message;
  message = error_for([](json& f) {
    f["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers", json::array({json{{"type", "Split"},
                                                              {"pattern", {{"Regex", "(unclosed"}}},
                                                              {"behavior", "Isolated"},
                                                              {"invert", false}},
                                                         json{{"type", "ByteLevel"}, {"use_regex", false}}})}};
  });
  EXPECT_NE(message.find("pre_tokenizer.pretokenizers[0].pattern.Regex"), std::string::npos) << message;
}

TEST(TokenizerJson, LoadsThroughTokenizerWithEosFromTheConfigBesideIt) {
  TempFolder folder;
  const fs::path path = folder.path() / "model" / "tokenizer.json";
  write_bytes(path, tiny_file().dump());
  const Tokenizer plain = Tokenizer::load(path);
  EXPECT_STREQ(plain.kind(), "tokenizer.json");
  EXPECT_EQ(plain.vocab_size(), 266);
  EXPECT_EQ(plain.eos_id(), 263);  // <|endoftext|>, a known name
  EXPECT_EQ(plain.piece(261), "\xC4\xA0w");
  EXPECT_EQ(plain.decode(plain.encode("hello world<|end|>")), "hello world<|end|>");
  write_bytes(path.parent_path() / "tokenizer_config.json", R"({"eos_token": {"content": "<|end|>"}})");
  const Tokenizer configured = open_tokenizer_file(path);
  EXPECT_EQ(configured.eos_id(), 264);
  EXPECT_NE(configured.fingerprint(), plain.fingerprint());
  // A copy carries the config, so it loads as the same tokenizer.
  const fs::path copy = copy_tokenizer_file(path, folder.path() / "run");
  EXPECT_EQ(copy.filename(), "tokenizer.json");
  EXPECT_EQ(Tokenizer::load(copy).fingerprint(), configured.fingerprint());
  write_bytes(path.parent_path() / "tokenizer_config.json", R"({"eos_token": "<|nope|>"})");
  const std::string message = message_of([&] { Tokenizer::load(path); });
  EXPECT_NE(message.find("<|nope|>"), std::string::npos) << message;
}

TEST(TokenizerJson, WithoutAnEosTokenIsAnInputErrorSayingHowToNameOne) {
  TempFolder folder;
  json file = tiny_file();
  file["added_tokens"] = json::array();
  const fs::path path = folder.path() / "tokenizer.json";
  write_bytes(path, file.dump());
  const std::string message = message_of([&] { Tokenizer::load(path); });
  EXPECT_NE(message.find("eos_token"), std::string::npos) << message;
}

TEST(TokenizerJson, ACorruptFileIsAnInputErrorNamingIt) {
  TempFolder folder;
  const fs::path path = folder.path() / "broken" / "tokenizer.json";
  write_bytes(path, tiny_file().dump().substr(0, 300));
  const std::string message = message_of([&] { open_tokenizer_file(path); });
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("not valid JSON"), std::string::npos) << message;
  const fs::path other = folder.path() / "vocab.txt";
  write_bytes(other, "x");
  const std::string type_message = message_of([&] { open_tokenizer_file(other); });
  EXPECT_NE(type_message.find("tokenizer.json"), std::string::npos) << type_message;
}

}  // namespace
}  // namespace retort::data
