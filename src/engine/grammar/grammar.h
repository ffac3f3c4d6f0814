// Grammar-constrained decoding: a GBNF grammar compiled to a byte-level
// context-free grammar, a recognizer over it, and per-token masks over a
// vocabulary.
//
// GBNF is llama.cpp's grammar syntax (grammars/README.md in llama.cpp):
// `name ::= alternatives` rules, `|`, groups `( )`, `*` `+` `?` and `{m}`
// `{m,}` `{m,n}` repetitions, string literals "...", character classes
// `[a-z]` / `[^...]` over Unicode code points, `.` (any code point), escapes
// \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH, `#` comments. A rule's
// alternatives may span lines only inside parentheses or after `|`.
//
// Code-point classes are lowered to UTF-8 byte sequences (the split of a
// code-point range into byte ranges of RE2's and Rust regex's utf8 ranges),
// so everything below works on bytes: a token that ends in the middle of a
// UTF-8 character is checked exactly like any other.
//
// The recognizer is the stack-based one of llama.cpp's grammar sampler
// (a set of parse stacks, each a path of grammar positions), with the stacks
// kept as hash-consed linked nodes so that equal stacks are one node and a
// step touches only the top, and with the sets of stacks memoized as states
// of a lazily built automaton (state x byte -> state). Bounded: every table
// has a cap and going past it throws GrammarError.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/error.h"

namespace kvad {

class Tokenizer;

/// A grammar that does not parse, refers to an undefined rule, is left
/// recursive, or exceeds a size limit; also a matcher past its state caps.
class GrammarError : public Error {
 public:
  using Error::Error;
};

/// A compiled byte-level grammar. Immutable once built; share it with
/// std::shared_ptr<const Grammar> between requests.
struct Grammar {
  enum Kind : uint8_t { kEnd = 0, kBytes = 1, kRule = 2 };
  struct Elem {
    Kind kind;
    uint32_t arg;  ///< kBytes: index into sets; kRule: rule id
  };
  using ByteSet = std::array<uint64_t, 4>;  ///< bit b set: byte b matches

  std::vector<Elem> elems;                    ///< all alternatives, each ended by kEnd
  std::vector<ByteSet> sets;
  std::vector<std::vector<uint32_t>> alts;    ///< per rule: start index of each alternative in elems
  std::vector<std::string> names;             ///< per rule; generated rules are "name-N"
  uint32_t root = 0;

  static bool has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }

  /// Parses GBNF text; `root` names the start rule. Limits: the text at most
  /// 1 MiB, repetition counts at most 10000, at most 1<<20 elements after
  /// expansion, nesting of groups at most 256. Throws GrammarError with the
  /// line and column for a syntax error, naming the rule for an undefined
  /// or left-recursive rule.
  static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::string_view root = "root");
};

/// Caps that keep a matcher bounded (memory is about 8 bytes per node plus
/// 1 KiB per state).
struct GrammarLimits {
  uint32_t max_depth = 4096;        ///< a parse stack deeper than this is a dead path
  uint32_t max_stacks = 4096;       ///< parse stacks alive at once (ambiguity) -> GrammarError
  uint32_t max_nodes = 1u << 21;    ///< stack nodes held -> compaction, then GrammarError
  uint32_t max_states = 16384;      ///< memoized stack sets -> compaction, then GrammarError
};

/// A byte-level recognizer over a Grammar: feed bytes, ask whether the text
/// so far is a complete sentence. Not thread-safe; one per generation.
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const Grammar> g, GrammarLimits lim = {});
  ~GrammarMatcher();
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;

  /// Feeds bytes. Returns false, with the state unchanged, when the text
  /// cannot continue any sentence of the grammar. Throws GrammarError past
  /// a cap of GrammarLimits.
  bool accept(std::string_view bytes);
  /// The text fed so far is a whole sentence of the grammar.
  bool accepting() const;
  /// Accepting, and no byte can follow: generation is over.
  bool finished() const;
  /// Back to the empty text.
  void reset();

  // Internals used by TokenGrammar (a state is a memoized set of stacks).
  uint32_t state() const;
  /// The state after byte b from state s, or kDead. Throws GrammarError
  /// past a hard cap (the state ids in use stay valid).
  uint32_t step(uint32_t s, uint8_t b);
  bool state_accepting(uint32_t s) const;
  bool state_empty(uint32_t s) const;  ///< no stack: no byte can follow
  void set_state(uint32_t s);
  /// Between tokens: when the tables are past their soft caps, rebuilds them
  /// from the current state alone (state ids change: only state() is valid).
  /// Returns true if it compacted.
  bool maybe_compact();
  /// Bumped whenever the tables are rebuilt (compaction by accept() or
  /// maybe_compact(), reset() after one): state ids from before are void.
  uint64_t generation() const;
  /// The memoized transitions, states x 256 (kUnknown: not computed yet;
  /// step() fills it). Valid until the next step() that adds a state.
  const uint32_t* transitions() const;
  static constexpr uint32_t kDead = 0xffffffffu;
  static constexpr uint32_t kUnknown = 0xfffffffeu;

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

/// The byte strings of a vocabulary in a trie laid out in preorder, so that
/// tokens sharing a prefix are walked once. Control, unknown and unused
/// tokens are left out (a grammar never produces them). Build once per
/// tokenizer and share.
class TokenTrie {
 public:
  /// Throws kvad::Error if the tokenizer has more than 1<<24 tokens.
  explicit TokenTrie(const Tokenizer& tok);
  struct Node {
    uint8_t byte;
    uint16_t depth;   ///< 1 for a first byte
    uint32_t end;     ///< index past this node's subtree
    uint32_t tok_begin, tok_end;  ///< ids()[tok_begin, tok_end): tokens whose bytes end here
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& ids() const { return ids_; }
  int32_t n_vocab() const { return n_vocab_; }
  const std::vector<int32_t>& eog() const { return eog_; }
  const std::string& bytes(int32_t id) const { return bytes_.at(static_cast<size_t>(id)); }
  bool in_trie(int32_t id) const { return in_trie_.at(static_cast<size_t>(id)) != 0; }
  uint16_t max_depth() const { return max_depth_; }

 private:
  std::vector<Node> nodes_;
  std::vector<int32_t> ids_;
  std::vector<std::string> bytes_;
  std::vector<uint8_t> in_trie_;
  std::vector<int32_t> eog_;
  int32_t n_vocab_ = 0;
  uint16_t max_depth_ = 0;
};

/// A grammar over a vocabulary: which tokens may come next, and advancing by
/// the sampled one. End-of-generation tokens are allowed exactly when the
/// text so far is a whole sentence.
class TokenGrammar {
 public:
  TokenGrammar(std::shared_ptr<const Grammar> g, std::shared_ptr<const TokenTrie> trie, GrammarLimits lim = {});
  /// Sets logits [n] of tokens that may not come next to -inf (n may exceed
  /// the trie's vocabulary: ids past it are masked). Throws GrammarError when
  /// no token can follow (the grammar needs bytes no token gives) or past a
  /// cap.
  void apply(float* logits, int32_t n);
  /// allowed [n_vocab]: 1 where the token may come next.
  void mask(std::vector<uint8_t>& allowed);
  /// Advances by a sampled token. Returns false (state unchanged) for a
  /// token the grammar does not allow.
  bool accept(int32_t id);
  bool finished() const { return m_.finished(); }
  bool accepting() const { return m_.accepting(); }
  double mask_seconds() const { return mask_s_; }  ///< total time spent in mask(), seconds
  int64_t masks() const { return n_masks_; }

 private:
  GrammarMatcher m_;
  std::shared_ptr<const TokenTrie> trie_;
  std::vector<uint32_t> path_;
  std::vector<uint8_t> allowed_;
  static constexpr size_t kMaskCache = 64;  ///< masks kept, n_vocab bytes each
  std::unordered_map<uint32_t, std::vector<uint8_t>> cache_;  ///< state -> mask, of the tables' generation below
  uint64_t cache_generation_ = 0;
  double mask_s_ = 0;
  int64_t n_masks_ = 0;
};

}  // namespace kvad
