// Tool-call and reasoning parsing (server/tool_calls.h) on text the formats'
// own chat templates write: an assistant turn with tool calls is rendered
// with the real template (kvad's Jinja engine, the request side of
// server/tool_prompt.h) and parsed back, whole and streamed byte by byte;
// the calls must come back the same. Then reasoning, malformed calls, and a
// corpus of broken outputs (tests/fixtures/tool_calls/broken) that must
// parse to content without failing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "jinja/chat_template.h"
#include "server/openai.h"
#include "server/tool_calls.h"
#include "server/tool_prompt.h"

using namespace kvad;
using namespace kvad::server;
using json = nlohmann::ordered_json;

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::vector<ToolSpec> specs() {
  ToolSpec w{"get_weather", "Weather in a city",
             json::parse(R"({"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city"]})")};
  ToolSpec t{"get_time", "Local time", json::parse(R"({"type":"object","properties":{"zone":{"type":"string"}}})")};
  return {w, t};
}

/// What both ways of parsing give.
struct Both {
  ParsedOutput whole;
  std::string content, reasoning;  ///< streamed, joined
  std::vector<std::pair<int, ToolCall>> calls;  ///< streamed
  bool stream_malformed = false;
};

Both parse_both(const std::string& reply, const OutputFormat& f) {
  Both b;
  b.whole = parse_output(reply, f);
  OutputStream os(f);
  auto take = [&](const OutputDelta& d) {
    b.content += d.content;
    b.reasoning += d.reasoning;
    for (const auto& c : d.calls) b.calls.push_back(c);
  };
  for (char c : reply) take(os.push(std::string(1, c)));
  take(os.finish());
  b.stream_malformed = os.malformed();
  return b;
}

void expect_same_calls(const std::vector<ToolCall>& got, const std::vector<ToolCall>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].name, want[i].name);
    EXPECT_EQ(json::parse(got[i].arguments), json::parse(want[i].arguments)) << got[i].arguments;
    EXPECT_EQ(got[i].id.rfind("call_", 0), 0u);
  }
}

struct Case {
  const char* file;  ///< under peer-data/templates, or fixtures/tool_calls
  bool peer;
  ToolFormat format;
  const char* reply_start;  ///< the text after which the assistant's turn begins
  const char* reply_end;    ///< the end-of-turn text (an end-of-generation token in real output)
  bool parallel;            ///< the template renders two calls in one turn
  bool think_open;          ///< the generation prompt opens <think>
};

const Case kCases[] = {
    {"Qwen-Qwen2.5-7B-Instruct.jinja", true, ToolFormat::hermes, "<|im_start|>assistant", "<|im_end|>", true, false},
    {"meta-llama-Llama-3.1-8B-Instruct.jinja", true, ToolFormat::llama3,
     "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", false, false},
    {"meta-llama-Llama-3.2-3B-Instruct.jinja", true, ToolFormat::llama3,
     "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>", false, false},
    {"mistralai-Mistral-Nemo-Instruct-2407.jinja", true, ToolFormat::mistral, "[/INST]", "</s>", true, false},
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", true, ToolFormat::deepseek, "<｜Assistant｜>",
     "<｜end▁of▁sentence｜>", true, true},
    {"Qwen-Qwen3-Coder.jinja", false, ToolFormat::qwen3_coder, "<|im_start|>assistant", "<|im_end|>", true, false},
    {"smollm2-135m.jinja", false, ToolFormat::generic, "<|im_start|>assistant\n", "<|im_end|>", true, false},
    // One call per turn: the template renders tool_calls[0] only.
    {"openai-gpt-oss-120b.jinja", false, ToolFormat::harmony, "<|start|>assistant", "<|call|>", false, false},
};

std::filesystem::path template_path(const Case& c) {
  if (c.peer) return std::filesystem::path(KVAD_PEER_DATA) / "templates" / c.file;
  const std::filesystem::path src(KVAD_SOURCE_DIR);
  if (std::string(c.file) == "smollm2-135m.jinja" || std::string(c.file) == "openai-gpt-oss-120b.jinja")
    return src / "tests/fixtures/templates" / c.file;
  return src / "tests/fixtures/tool_calls" / c.file;
}

}  // namespace

TEST(ToolCalls, TemplatesRenderCallsThatParseBack) {
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.file);
    const auto path = template_path(c);
    if (!std::filesystem::exists(path)) {
      ADD_FAILURE() << "missing " << path;
      continue;
    }
    ChatTemplate tmpl = ChatTemplate::parse(read(path));
    EXPECT_EQ(detect_tool_format(tmpl.source()), c.format) << tool_format_name(detect_tool_format(tmpl.source()));
    const TemplateTools tt = probe_template(tmpl);
    EXPECT_EQ(tt.renders_tool_calls, c.format != ToolFormat::generic);
    // DeepSeek-R1's template shows past calls but not the tool list (kvad describes the tools).
    EXPECT_EQ(tt.renders_tools, c.format != ToolFormat::generic && c.format != ToolFormat::deepseek);

    // The conversation as a client sends it: calls with JSON-text arguments.
    CompletionRequest r;
    r.chat = true;
    r.tools = specs();
    r.tool_choice.kind = ToolChoice::automatic;
    std::vector<ToolCall> want = {{"abcDEF123", "get_weather", R"({"city": "Paris, France", "days": 3})"}};
    if (c.parallel) want.push_back({"xyz789ABC", "get_time", R"({"zone": "Europe/Paris"})"});
    r.messages.push_back({"user", "What is the weather in Paris?", false, {}, ""});
    r.messages.push_back({"assistant", "", true, want, ""});
    const ChatInput in = build_chat_input(r, tt);
    const std::string text = tmpl.render(chat_context(in.messages, false, "<s>", "</s>", in.tools));
    const size_t at = text.rfind(c.reply_start);
    ASSERT_NE(at, std::string::npos) << text;
    std::string reply = text.substr(at + std::string(c.reply_start).size());
    if (const size_t e = reply.rfind(c.reply_end); e != std::string::npos) reply.resize(e);
    SCOPED_TRACE(reply);

    // The generation prompt, for think_open.
    CompletionRequest r1 = r;
    r1.messages.pop_back();
    const ChatInput in1 = build_chat_input(r1, tt);
    const std::string prompt = tmpl.render(chat_context(in1.messages, true, "<s>", "</s>", in1.tools));
    const OutputFormat f = output_format(r, tt, in1, prompt);
    EXPECT_EQ(f.format, c.format);
    EXPECT_EQ(f.think_open, c.think_open);
    OutputFormat fr = f;
    fr.think_open = false;  // the rendered past turn carries no <think>

    const Both b = parse_both(reply, fr);
    EXPECT_FALSE(b.whole.malformed);
    EXPECT_EQ(b.whole.content, "");
    expect_same_calls(b.whole.calls, want);
    std::vector<ToolCall> streamed;
    for (size_t i = 0; i < b.calls.size(); ++i) {
      EXPECT_EQ(b.calls[i].first, static_cast<int>(i));
      streamed.push_back(b.calls[i].second);
    }
    expect_same_calls(streamed, want);
    EXPECT_EQ(b.content, "");

    // Text before the call (where the format allows it) stays content, and
    // no byte of the call leaks into it while streaming.
    // (Harmony has no text outside messages: see ToolCalls.Harmony.)
    if (c.format != ToolFormat::llama3 && c.format != ToolFormat::generic && c.format != ToolFormat::harmony) {
      const Both pre = parse_both("Let me look that up.\n" + reply, fr);
      EXPECT_EQ(pre.whole.content, "Let me look that up.");
      EXPECT_EQ(pre.content, "Let me look that up.");
      expect_same_calls(pre.whole.calls, want);
    }
    // parallel_tool_calls false: the first call only.
    OutputFormat one = fr;
    one.parallel = false;
    EXPECT_EQ(parse_output(reply, one).calls.size(), 1u);
  }
}

TEST(ToolCalls, RoundTripWithKvadIdsRendersOnEveryTemplate) {
  // A call kvad returned (id call_ + 24 hex) and its result, sent back.
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.file);
    const auto path = template_path(c);
    if (!std::filesystem::exists(path)) continue;
    ChatTemplate tmpl = ChatTemplate::parse(read(path));
    const TemplateTools tt = probe_template(tmpl);
    CompletionRequest r;
    r.chat = true;
    r.tools = specs();
    r.tool_choice.kind = ToolChoice::automatic;
    const std::string id = "call_0123456789abcdef01234567";
    r.messages.push_back({"user", "Weather in Oslo?", false, {}, ""});
    r.messages.push_back({"assistant", "", true, {{id, "get_weather", R"({"city": "Oslo"})"}}, ""});
    r.messages.push_back({"tool", "sunny", false, {}, id});
    const ChatInput in = build_chat_input(r, tt);
    std::string text;
    ASSERT_NO_THROW(text = tmpl.render(chat_context(in.messages, true, "<s>", "</s>", in.tools)));
    EXPECT_NE(text.find("sunny"), std::string::npos);
    EXPECT_NE(text.find("Oslo"), std::string::npos);
  }
}

TEST(ToolCalls, ForcedCallPrefixParses) {
  // The prompt writes the call's opening; the model writes the rest.
  struct F { ToolFormat f; std::string rest; };
  const F cases[] = {
      {ToolFormat::hermes, "{\"city\": \"Oslo\"}}\n</tool_call>"},
      {ToolFormat::qwen3_coder, "<parameter=city>\nOslo\n</parameter>\n</function>\n</tool_call>"},
      {ToolFormat::mistral, "{\"city\": \"Oslo\"}}]"},
      {ToolFormat::deepseek, "{\"city\": \"Oslo\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolFormat::llama3, "{\"city\": \"Oslo\"}}"},
      {ToolFormat::generic, "{\"city\": \"Oslo\"}}"},
      {ToolFormat::harmony, "{\"city\": \"Oslo\"}"},  // <|call|> ends generation
  };
  for (const F& c : cases) {
    SCOPED_TRACE(tool_format_name(c.f));
    OutputFormat f;
    f.format = c.f;
    f.tools = true;
    f.specs = specs();
    f.prefix = forced_call_prefix(c.f, "get_weather");
    f.stop_after_call = true;
    const Both b = parse_both(c.rest + (c.f == ToolFormat::harmony ? "<|call|>" : "") + "\nand some trailing words", f);
    ASSERT_EQ(b.whole.calls.size(), 1u);
    EXPECT_EQ(b.whole.calls[0].name, "get_weather");
    EXPECT_EQ(json::parse(b.whole.calls[0].arguments), json::parse(R"({"city":"Oslo"})"));
    EXPECT_EQ(b.whole.content, "");
    EXPECT_EQ(b.content, "");
    ASSERT_EQ(b.calls.size(), 1u);
  }
}

TEST(ToolCalls, LlamaPythonTagAndGenericShapes) {
  OutputFormat f;
  f.tools = true;
  f.specs = specs();
  f.format = ToolFormat::llama3;
  auto p = parse_output("<|python_tag|>{\"name\": \"get_time\", \"parameters\": {\"zone\": \"UTC\"}}", f);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_time");
  f.format = ToolFormat::generic;
  for (const char* text : {R"({"tool_calls": [{"name": "get_time", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Rome"}}]})",
                           "```json\n[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}]\n```"}) {
    SCOPED_TRACE(text);
    const Both b = parse_both(text, f);
    ASSERT_EQ(b.whole.calls.size(), 2u);
    EXPECT_EQ(b.whole.calls[1].arguments, R"({"city":"Rome"})");
    EXPECT_EQ(b.calls.size(), 2u);
    EXPECT_NE(b.whole.calls[0].id, b.whole.calls[1].id);
  }
  // JSON that is no call is the model's answer.
  const Both j = parse_both(R"({"answer": 42})", f);
  EXPECT_TRUE(j.whole.calls.empty());
  EXPECT_EQ(j.whole.content, R"({"answer": 42})");
  EXPECT_EQ(j.content, R"({"answer": 42})");
}

TEST(ToolCalls, Reasoning) {
  OutputFormat f;
  Both b = parse_both("<think>\nThe user greets.\n</think>\n\nHello there!", f);
  EXPECT_EQ(b.whole.reasoning, "The user greets.");
  EXPECT_EQ(b.whole.content, "Hello there!");
  EXPECT_EQ(b.reasoning, "The user greets.");
  EXPECT_EQ(b.content, "Hello there!");
  // The prompt opened <think> (DeepSeek-R1's template).
  f.think_open = true;
  b = parse_both("Short thought.</think>Answer.", f);
  EXPECT_EQ(b.whole.reasoning, "Short thought.");
  EXPECT_EQ(b.whole.content, "Answer.");
  EXPECT_EQ(b.content, "Answer.");
  // Never closed: all reasoning.
  b = parse_both("Still thinking", f);
  EXPECT_EQ(b.whole.reasoning, "Still thinking");
  EXPECT_EQ(b.reasoning, "Still thinking");
  EXPECT_EQ(b.whole.content, "");
  // reasoning_format none: as written.
  f.think_open = false;
  f.reasoning = false;
  b = parse_both("<think>x</think>y", f);
  EXPECT_EQ(b.whole.content, "<think>x</think>y");
  EXPECT_EQ(b.content, "<think>x</think>y");
  // Reasoning then a call (Qwen3).
  f.reasoning = true;
  f.tools = true;
  f.format = ToolFormat::hermes;
  f.specs = specs();
  b = parse_both("<think>need weather</think>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>", f);
  EXPECT_EQ(b.whole.reasoning, "need weather");
  ASSERT_EQ(b.whole.calls.size(), 1u);
  EXPECT_EQ(b.whole.content, "");
  EXPECT_EQ(b.content, "");
}

// gpt-oss's Harmony replies (the shapes of OpenAI's Harmony format guide and
// of the template's own renderings): analysis → reasoning, final → content,
// a message to=functions.NAME → a call, whole and streamed byte by byte.
TEST(ToolCalls, Harmony) {
  OutputFormat f;
  f.format = ToolFormat::harmony;
  // Reasoning then the answer; <|return|> ends generation (absent or present).
  for (const char* tail : {"", "<|return|>"}) {
    const Both b = parse_both(std::string("<|channel|>analysis<|message|>User greets. Reply kindly.<|end|>"
                                          "<|start|>assistant<|channel|>final<|message|>Hello there!") + tail, f);
    EXPECT_EQ(b.whole.reasoning, "User greets. Reply kindly.");
    EXPECT_EQ(b.whole.content, "Hello there!");
    EXPECT_EQ(b.reasoning, "User greets. Reply kindly.");
    EXPECT_EQ(b.content, "Hello there!");
    EXPECT_FALSE(b.whole.malformed);
  }
  // Cut off inside the analysis: all reasoning so far, no content.
  Both b = parse_both("<|channel|>analysis<|message|>Thinking about <|en", f);
  EXPECT_EQ(b.whole.reasoning, "Thinking about <|en");
  EXPECT_EQ(b.reasoning, "Thinking about <|en");
  EXPECT_EQ(b.content, "");
  // A model that does not write Harmony: content as written.
  b = parse_both("Plain answer, no channels.", f);
  EXPECT_EQ(b.whole.content, "Plain answer, no channels.");
  EXPECT_EQ(b.content, "Plain answer, no channels.");
  EXPECT_EQ(b.reasoning, "");
  // reasoning_format none: the analysis message as generated, in content.
  OutputFormat raw = f;
  raw.reasoning = false;
  const std::string two = "<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|>y";
  b = parse_both(two, raw);
  EXPECT_EQ(b.whole.content, two);
  EXPECT_EQ(b.content, two);
  EXPECT_EQ(b.reasoning, "");
  // Calls: the recipient after the channel (the model's usual order) or in
  // the header before it (the template's rendering), with reasoning first
  // and a preamble to the user on the commentary channel.
  f.tools = true;
  f.specs = specs();
  for (const std::string& call : {std::string("<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
                                             "<|message|>{\"city\": \"Oslo\"}"),
                                 std::string("<|start|>assistant to=functions.get_weather<|channel|>commentary json"
                                             "<|message|>{\"city\": \"Oslo\"}<|call|>")}) {
    SCOPED_TRACE(call);
    b = parse_both("<|channel|>analysis<|message|>Need the weather.<|end|>"
                   "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>" + call, f);
    EXPECT_EQ(b.whole.reasoning, "Need the weather.");
    EXPECT_EQ(b.whole.content, "Checking.");
    EXPECT_EQ(b.content, "Checking.");
    EXPECT_EQ(b.reasoning, "Need the weather.");
    expect_same_calls(b.whole.calls, {{"", "get_weather", R"({"city":"Oslo"})"}});
    ASSERT_EQ(b.calls.size(), 1u);
    EXPECT_EQ(b.calls[0].second.name, "get_weather");
  }
  // The first message's recipient right after the prompt's <|start|>assistant.
  b = parse_both(" to=functions.get_time<|channel|>commentary json<|message|>{\"zone\": \"UTC\"}", f);
  expect_same_calls(b.whole.calls, {{"", "get_time", R"({"zone":"UTC"})"}});
  EXPECT_EQ(b.content, "");
  // Bad calls are content: unknown function, arguments not an object, broken JSON.
  for (const std::string& bad : {std::string("<|channel|>commentary to=functions.rm_rf <|constrain|>json<|message|>{}"),
                                std::string("<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>[1]"),
                                std::string("<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>{\"zone\":")}) {
    SCOPED_TRACE(bad);
    b = parse_both(bad, f);
    EXPECT_TRUE(b.whole.calls.empty());
    EXPECT_TRUE(b.whole.malformed);
    EXPECT_EQ(b.whole.content, bad);
    EXPECT_EQ(b.content, bad);
    EXPECT_TRUE(b.calls.empty());
  }
}

TEST(ToolCalls, MalformedCallsAreContent) {
  OutputFormat f;
  f.tools = true;
  f.format = ToolFormat::hermes;
  f.specs = specs();
  for (const std::string& text : {
           std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call>"),
           std::string("<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>"),
           std::string("Sure <tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\""),  // cut off
           std::string("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": [1, 2]}\n</tool_call>"),
       }) {
    SCOPED_TRACE(text);
    const Both b = parse_both(text, f);
    EXPECT_TRUE(b.whole.calls.empty());
    EXPECT_TRUE(b.whole.malformed);
    EXPECT_EQ(b.whole.content, text);
    EXPECT_TRUE(b.calls.empty());
    EXPECT_EQ(b.content, text);
  }
  // A text that only mentions the marker's start is content, streamed too.
  const Both b = parse_both("Use <tool_ to call", f);
  EXPECT_EQ(b.content, "Use <tool_ to call");
}

TEST(ToolCalls, JsonValueEnd) {
  EXPECT_EQ(json_value_end(R"({"a": "}"} tail)", 0), 10u);
  EXPECT_EQ(json_value_end(R"(  [1, [2], {"x": "\"]"}] )", 0), 24u);
  EXPECT_EQ(json_value_end(R"({"a": [)", 0), std::string::npos);
  EXPECT_EQ(json_value_end("x", 0), 0u);
  EXPECT_EQ(json_value_end("}", 0), 0u);
}

TEST(ToolCalls, AllowedCallsSchema) {
  ToolChoice named{ToolChoice::named, "get_time"};
  json s = allowed_calls_schema(specs(), named, true);
  EXPECT_EQ(s["properties"]["name"]["const"], "get_time");
  json any = allowed_calls_schema(specs(), ToolChoice{ToolChoice::required, ""}, true);
  EXPECT_EQ(any["type"], "array");
  EXPECT_EQ(any["items"]["anyOf"].size(), 2u);
}

TEST(ToolCalls, BrokenCorpusNeverFails) {
  const std::filesystem::path dir = std::filesystem::path(KVAD_SOURCE_DIR) / "tests/fixtures/tool_calls/broken";
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string text = read(e.path());
    for (ToolFormat fmt : {ToolFormat::generic, ToolFormat::hermes, ToolFormat::qwen3_coder, ToolFormat::llama3,
                           ToolFormat::mistral, ToolFormat::deepseek, ToolFormat::harmony}) {
      SCOPED_TRACE(e.path().filename().string() + " " + tool_format_name(fmt));
      OutputFormat f;
      f.tools = true;
      f.format = fmt;
      f.specs = specs();
      const Both b = parse_both(text, f);
      // Streamed and whole agree.
      EXPECT_EQ(b.calls.size(), b.whole.calls.size());
      EXPECT_EQ(b.content, b.whole.content);
      EXPECT_EQ(b.reasoning, b.whole.reasoning);
    }
    ++n;
  }
  EXPECT_GE(n, 8u);
}
