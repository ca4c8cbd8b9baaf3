// CompletionText, the text side of `retort generate`: the streamed pieces add up to the final text, a stop string
// cuts the text before it and is never streamed (not even its first characters), the end-of-text token ends the
// completion, and a character the tokenizer spells in bytes is streamed only once it is whole.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/data/tokenizer.h"
#include "parallel/generate/completion_text.h"
#include "parallel/generate/prompts_file.h"

namespace retort::generate {
namespace {

namespace fs = std::filesystem;

const data::Tokenizer& tokenizer() {
  static const data::Tokenizer t = [] {
    std::vector<std::string> documents;
    for (int i = 0; i < 40; ++i)
      documents.push_back("the cat sat on the mat; hello there, hello world. " + std::to_string(i * 7919));
    data::TokenizerTrainOptions options;
    options.vocab_size = 300;
    options.model_path = fs::temp_directory_path() / "retort_test_completion_text" / "tokenizer.model";
    return data::Tokenizer::train(documents, options);
  }();
  return t;
}

struct Streamed {
  std::string printed;                // every take_stable() piece, in order
  std::vector<std::string> prefixes;  // what had been printed after each token
  int64_t pushed = 0;
  bool ended_by_push = false;
};

Streamed stream(CompletionText& completion, const std::vector<int32_t>& tokens) {
  Streamed s;
  for (int32_t token : tokens) {
    ++s.pushed;
    const bool more = completion.push(token);
    s.printed += completion.take_stable();
    s.prefixes.push_back(s.printed);
    if (!more) {
      s.ended_by_push = true;
      break;
    }
  }
  completion.finish();
  s.printed += completion.take_stable();
  return s;
}

TEST(CompletionText, StreamedPiecesAddUpToTheText) {
  const std::string text = "hello world, the cat sat";
  CompletionText completion(tokenizer(), {});
  const Streamed s = stream(completion, tokenizer().encode(text));
  EXPECT_FALSE(s.ended_by_push);
  EXPECT_EQ(completion.text(), text);
  EXPECT_EQ(s.printed, text);
  EXPECT_EQ(completion.end(), CompletionText::End::None);
}

TEST(CompletionText, AStopStringCutsTheTextAndIsNeverStreamed) {
  const std::string text = "hello world, the cat sat on the mat";
  const std::vector<int32_t> tokens = tokenizer().encode(text);
  CompletionText completion(tokenizer(), {"", "zebra", "cat sat"});
  const Streamed s = stream(completion, tokens);
  EXPECT_TRUE(s.ended_by_push);
  EXPECT_LT(s.pushed, static_cast<int64_t>(tokens.size())) << "the tokens after the stop string were not needed";
  EXPECT_EQ(completion.text(), "hello world, the ");
  EXPECT_EQ(completion.end(), CompletionText::End::StopString);
  EXPECT_EQ(s.printed, "hello world, the ");
  for (const auto& printed : s.prefixes)
    EXPECT_EQ(printed.find("ca"), std::string::npos) << "the start of the stop string was streamed: " << printed;
  // The token that completes the stop string is the last one pushed: the text before it does not hold it.
  const std::vector<int32_t> before(tokens.begin(), tokens.begin() + s.pushed - 1);
  EXPECT_EQ(tokenizer().decode(before).find("cat sat"), std::string::npos);
}

TEST(CompletionText, TheEarliestOfSeveralStopStringsWins) {
  CompletionText completion(tokenizer(), {"mat", "the c"});
  stream(completion, tokenizer().encode("on the cat, the mat"));
  EXPECT_EQ(completion.text(), "on ");
}

TEST(CompletionText, TheEndOfTextTokenEndsTheCompletion) {
  CompletionText completion(tokenizer(), {"zebra"});
  std::vector<int32_t> tokens = tokenizer().encode("the cat");
  tokens.push_back(tokenizer().eos_id());
  tokens.push_back(tokens.front());
  const Streamed s = stream(completion, tokens);
  EXPECT_TRUE(s.ended_by_push);
  EXPECT_EQ(s.pushed, static_cast<int64_t>(tokens.size()) - 1);
  EXPECT_EQ(completion.text(), "the cat");
  EXPECT_EQ(completion.end(), CompletionText::End::EndOfText);
  EXPECT_EQ(s.printed, "the cat");
}

TEST(CompletionText, ByteSpelledCharactersStreamOnlyWhole) {
  // Neither the euro sign nor the e-acute was in the tokenizer's training text: each is spelled in UTF-8 bytes.
  const std::string text = "the \xE2\x82\xAC cat \xC3\xA9";
  const std::vector<int32_t> tokens = tokenizer().encode(text);
  ASSERT_GE(tokens.size(), 9u);
  CompletionText completion(tokenizer(), {});
  const Streamed s = stream(completion, tokens);
  EXPECT_EQ(s.printed, text) << "a partial character was streamed as a replacement character";
  for (const auto& printed : s.prefixes) EXPECT_EQ(text.compare(0, printed.size(), printed), 0) << printed;
}

TEST(CompletionText, StopStringsUnderstandEscapes) {
  EXPECT_EQ(unescape_stop_string("a\\nb\\tc\\\\d\\x"), "a\nb\tc\\d\\x");
  EXPECT_EQ(unescape_stop_string("\\"), "\\");
}

}  // namespace
}  // namespace retort::generate
