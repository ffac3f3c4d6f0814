// How `kvad run` and `kvad chat` print a chat reply: the reasoning a model
// writes before its answer (<think>...</think> of DeepSeek-R1 and Qwen3,
// gpt-oss's Harmony analysis channel) apart from the answer, split by the
// server's parser (server/tool_calls.h OutputStream) so that the terminal
// and the API agree; and the grammar flags llama.cpp's llama-cli has.
#pragma once
#include <memory>
#include <string>

namespace CLI { class App; class Option; }

namespace kvad {
class ChatPrompt;
class Tokenizer;
class Grammar;
class TokenGrammar;
}  // namespace kvad

namespace kvad::server { class OutputStream; }

namespace kvad::cli {

/// --reasoning-format (llama-server's flag): "auto" splits the reasoning
/// out, "none" prints the reply as the model wrote it.
struct ReasoningOptions {
  std::string format = "auto";
  void add_to(CLI::App* c);
};

/// --grammar GBNF, --grammar-file FILE, -j/--json-schema SCHEMA,
/// -jf/--json-schema-file FILE (llama-cli's flags): the reply is decoded
/// under that grammar.
struct GrammarOptions {
  std::string gbnf, file, json_schema, json_schema_file;
  void add_to(CLI::App* c);
  /// Parses the flag's grammar (before the model loads, so that a bad one
  /// costs nothing); null when no flag was given. Throws kvad::Error naming
  /// the flag: more than one given, an empty value, an unreadable file, a
  /// GBNF syntax error (line and column), a schema that is not JSON or
  /// that kvad's converter refuses.
  std::shared_ptr<const Grammar> parse() const;
  /// `g` over `tok`'s vocabulary (null for a null g).
  static std::unique_ptr<TokenGrammar> bind(const std::shared_ptr<const Grammar>& g, const Tokenizer& tok);

 private:
  CLI::Option *gbnf_ = nullptr, *file_ = nullptr, *json_schema_ = nullptr, *json_schema_file_ = nullptr;
};

/// Prints one reply as it streams. With splitting on, the reasoning goes to
/// stderr (dimmed on a terminal) and the answer to stdout, so that
/// `kvad run ... > answer.txt` keeps the answer alone; with it off, the
/// text goes to stdout as it comes.
class ReplyPrinter {
 public:
  /// `chat`: the template the prompt was rendered with (null for a raw
  /// prompt: nothing is split); `rendered`: the prompt's text, whose end
  /// says whether the reply starts inside an open <think>.
  ReplyPrinter(const ChatPrompt* chat, const Tokenizer& tok, const std::string& rendered,
               const ReasoningOptions& o);
  ~ReplyPrinter();
  /// Decode control tokens as text (Harmony's markers are control tokens).
  bool special_text() const { return special_text_; }
  void push(const std::string& piece);
  /// The end of the reply; returns its answer (the content without the
  /// reasoning), as a chat history keeps it.
  std::string finish();

 private:
  void print(const std::string& reasoning, const std::string& content);
  std::unique_ptr<server::OutputStream> parser_;
  bool special_text_ = false, dim_ = false, in_reasoning_ = false, any_reasoning_ = false;
  std::string content_;
};

}  // namespace kvad::cli
