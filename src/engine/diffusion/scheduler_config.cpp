#include "engine/diffusion/scheduler_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace kvad::diffusion {

namespace {

using json = nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;

struct Name {
  const char* name;
  SchedulerChoice choice;
};
constexpr Name kNames[] = {
    {"euler", {SchedulerKind::Euler, false}},
    {"euler_a", {SchedulerKind::EulerAncestral, false}},
    {"ddim", {SchedulerKind::DDIM, false}},
    {"dpm++2m", {SchedulerKind::DPMSolverMultistep, false}},
    {"dpm++2m_karras", {SchedulerKind::DPMSolverMultistep, true}},
    // other spellings
    {"euler-ancestral", {SchedulerKind::EulerAncestral, false}},
    {"euler_ancestral", {SchedulerKind::EulerAncestral, false}},
    {"dpmpp_2m", {SchedulerKind::DPMSolverMultistep, false}},
    {"dpmpp_2m_karras", {SchedulerKind::DPMSolverMultistep, true}},
    {"Euler", {SchedulerKind::Euler, false}},
    {"Euler a", {SchedulerKind::EulerAncestral, false}},
    {"DDIM", {SchedulerKind::DDIM, false}},
    {"DPM++ 2M", {SchedulerKind::DPMSolverMultistep, false}},
    {"DPM++ 2M Karras", {SchedulerKind::DPMSolverMultistep, true}},
};

// Reads the keys of one scheduler class: a key the file holds, else `def`.
class Reader {
 public:
  Reader(const json& j, const std::string& name) : j_(j), name_(name) {}
  [[noreturn]] void fail(const char* key, const std::string& what) const {
    throw Error(name_ + ": \"" + key + "\": " + what);
  }
  const json* find(const char* key) const {
    auto it = j_.find(key);
    if (it == j_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean()) fail(key, "expected true or false, got " + v->dump());
    return v->get<bool>();
  }
  double number(const char* key, double def, double lo, double hi) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number()) fail(key, "expected a number, got " + v->dump());
    const double x = v->get<double>();
    if (!(x >= lo && x <= hi)) fail(key, "value " + v->dump() + " out of range");
    return x;
  }
  int64_t integer(const char* key, int64_t def, int64_t lo, int64_t hi) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + v->dump());
    const int64_t x = v->get<int64_t>();
    if (x < lo || x > hi) fail(key, "value " + std::to_string(x) + " out of range [" + std::to_string(lo) + ", " +
                                        std::to_string(hi) + "]");
    return x;
  }
  std::string str(const char* key, const char* def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_string()) fail(key, "expected a string, got " + v->dump());
    return v->get<std::string>();
  }
  template <typename E>
  E choose(const char* key, const char* def, std::initializer_list<std::pair<const char*, E>> options) const {
    const std::string s = str(key, def);
    std::string names;
    for (const auto& [n, e] : options) {
      if (s == n) return e;
      names += (names.empty() ? "" : ", ") + std::string(n);
    }
    fail(key, "\"" + s + "\" is not supported (supported: " + names + ")");
  }
  void refuse_true(const char* key, const char* what) const {
    if (boolean(key, false)) fail(key, std::string(what) + " is not supported");
  }

 private:
  const json& j_;
  const std::string& name_;
};

// Python's json.dumps writes float('inf') and nan as the bare words
// Infinity, -Infinity and NaN (diffusers' DPMSolverMultistepScheduler saves
// "lambda_min_clipped": -Infinity); JSON has no such tokens. Outside strings
// they become the strings "Infinity", "-Infinity" and "NaN".
std::string quote_python_specials(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 16);
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) out += text[++i];
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (std::string_view word : {"-Infinity", "Infinity", "NaN"}) {
      if (text.substr(i, word.size()) == word) {
        out += '"';
        out += word;
        out += '"';
        i += word.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

}  // namespace

SchedulerChoice parse_scheduler_name(std::string_view name) {
  for (const Name& n : kNames)
    if (name == n.name) return n.choice;
  std::string list;
  for (const std::string& n : scheduler_names()) list += (list.empty() ? "" : ", ") + n;
  throw Error("unknown scheduler \"" + std::string(name) + "\" (schedulers: " + list + ")");
}

std::string scheduler_name(const SchedulerChoice& c) {
  switch (c.kind) {
    case SchedulerKind::Euler: return "euler";
    case SchedulerKind::EulerAncestral: return "euler_a";
    case SchedulerKind::DDIM: return "ddim";
    case SchedulerKind::DPMSolverMultistep: return c.karras ? "dpm++2m_karras" : "dpm++2m";
  }
  return "?";
}

std::string a1111_sampler_name(SchedulerKind k) {
  switch (k) {
    case SchedulerKind::Euler: return "Euler";
    case SchedulerKind::EulerAncestral: return "Euler a";
    case SchedulerKind::DDIM: return "DDIM";
    case SchedulerKind::DPMSolverMultistep: return "DPM++ 2M";
  }
  return "?";
}

const std::vector<std::string>& scheduler_names() {
  static const std::vector<std::string> names = {"euler", "euler_a", "ddim", "dpm++2m", "dpm++2m_karras"};
  return names;
}

SchedulerConfig SchedulerConfig::parse(std::string_view text, const std::string& name) {
  if (text.size() > kMaxConfigBytes)
    throw Error(name + ": " + std::to_string(text.size()) + " bytes is over the 1 MiB a scheduler config may hold");
  SchedulerConfig c;
  c.name_ = name;
  try {
    c.json_ = json::parse(quote_python_specials(text));
  } catch (const json::exception& e) {
    throw Error(name + ": not valid JSON: " + e.what());
  }
  if (!c.json_.is_object()) throw Error(name + ": the top level is not a JSON object");
  auto it = c.json_.find("_class_name");
  if (it != c.json_.end()) {
    if (!it->is_string()) throw Error(name + ": \"_class_name\": expected a string, got " + it->dump());
    c.class_name_ = it->get<std::string>();
  }
  return c;
}

SchedulerConfig SchedulerConfig::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(path + ": cannot open");
  std::string text(kMaxConfigBytes + 1, '\0');
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  return parse(text, path);
}

SchedulerParams SchedulerConfig::resolve(const SchedulerChoice& choice) const {
  const Reader r(json_, name_);
  const SchedulerKind k = choice.kind;
  const bool euler = k == SchedulerKind::Euler, ancestral = k == SchedulerKind::EulerAncestral;
  const bool ddim = k == SchedulerKind::DDIM, dpm = k == SchedulerKind::DPMSolverMultistep;
  SchedulerParams p;
  p.choice = choice;
  p.num_train_timesteps = r.integer("num_train_timesteps", 1000, 2, 100000);
  p.beta_start = r.number("beta_start", 0.0001, 0, 1);
  p.beta_end = r.number("beta_end", 0.02, 0, 1);
  p.beta_schedule = r.choose<BetaSchedule>("beta_schedule", "linear",
                                           {{"linear", BetaSchedule::Linear},
                                            {"scaled_linear", BetaSchedule::ScaledLinear},
                                            {"squaredcos_cap_v2", BetaSchedule::SquaredCosCapV2}});
  if (const json* tb = r.find("trained_betas")) {
    if (!tb->is_array()) r.fail("trained_betas", "expected a list of numbers or null");
    if (static_cast<int64_t>(tb->size()) != p.num_train_timesteps)
      r.fail("trained_betas", std::to_string(tb->size()) + " values for " + std::to_string(p.num_train_timesteps) +
                                  " train timesteps");
    for (const json& v : *tb) {
      if (!v.is_number() || !(v.get<double>() >= 0 && v.get<double>() < 1))
        r.fail("trained_betas", "a value that is not a number in [0, 1): " + v.dump());
      p.trained_betas.push_back(static_cast<float>(v.get<double>()));
    }
    p.beta_schedule = BetaSchedule::Trained;
  }
  p.prediction_type = r.choose<Prediction>("prediction_type", "epsilon",
                                           {{"epsilon", Prediction::Epsilon},
                                            {"v_prediction", Prediction::VPrediction},
                                            {"sample", Prediction::Sample},
                                            {"original_sample", Prediction::Sample}});
  if (ancestral && p.prediction_type == Prediction::Sample)
    r.fail("prediction_type", "\"sample\" is not implemented by EulerAncestralDiscreteScheduler");
  if ((ddim || dpm) && r.str("prediction_type", "epsilon") == "original_sample")
    r.fail("prediction_type", "\"original_sample\" is Euler's spelling; this scheduler reads \"sample\"");
  p.timestep_spacing = r.choose<TimestepSpacing>("timestep_spacing", ddim ? "leading" : "linspace",
                                                 {{"linspace", TimestepSpacing::Linspace},
                                                  {"leading", TimestepSpacing::Leading},
                                                  {"trailing", TimestepSpacing::Trailing}});
  p.steps_offset = r.integer("steps_offset", 0, 0, p.num_train_timesteps);
  p.rescale_betas_zero_snr = r.boolean("rescale_betas_zero_snr", false);

  if (euler || dpm) {
    if (euler)
      p.interpolation_type = r.choose<Interpolation>("interpolation_type", "linear",
                                                     {{"linear", Interpolation::Linear},
                                                      {"log_linear", Interpolation::LogLinear}});
    p.use_karras_sigmas = choice.karras || r.boolean("use_karras_sigmas", false);
    r.refuse_true("use_exponential_sigmas", "exponential sigmas");
    r.refuse_true("use_beta_sigmas", "beta sigmas");
    if (euler && r.find("sigma_min")) p.sigma_min = r.number("sigma_min", 0, 0, 1e6);
    if (euler && r.find("sigma_max")) p.sigma_max = r.number("sigma_max", 0, 0, 1e6);
    p.final_sigma_min = r.choose<bool>("final_sigmas_type", "zero", {{"zero", false}, {"sigma_min", true}});
  }
  if (euler) {
    if (r.str("timestep_type", "discrete") != "discrete") r.fail("timestep_type", "only \"discrete\" is supported");
  }
  if (ddim) {
    p.clip_sample = r.boolean("clip_sample", true);
    p.clip_sample_range = r.number("clip_sample_range", 1.0, 0, 1e6);
    p.set_alpha_to_one = r.boolean("set_alpha_to_one", true);
  }
  if (ddim || dpm) r.refuse_true("thresholding", "dynamic thresholding");
  if (dpm) {
    p.solver_order = static_cast<int>(r.integer("solver_order", 2, 1, 3));
    if (p.solver_order == 3) r.fail("solver_order", "3 is not supported (1 or 2: DPM++ 2M)");
    p.solver_type = r.choose<SolverType>("solver_type", "midpoint",
                                         {{"midpoint", SolverType::Midpoint},
                                          {"heun", SolverType::Heun},
                                          {"logrho", SolverType::Midpoint},
                                          {"bh1", SolverType::Midpoint},
                                          {"bh2", SolverType::Midpoint}});
    const std::string algo = r.str("algorithm_type", "dpmsolver++");
    if (algo != "dpmsolver++" && algo != "deis")
      r.fail("algorithm_type", "\"" + algo + "\" is not supported (dpmsolver++)");
    p.lower_order_final = r.boolean("lower_order_final", true);
    p.euler_at_final = r.boolean("euler_at_final", false);
    r.refuse_true("use_lu_lambdas", "Lu lambdas");
    r.refuse_true("use_flow_sigmas", "flow sigmas");
    r.refuse_true("use_dynamic_shifting", "dynamic shifting");
    if (const json* v = r.find("variance_type"))
      r.fail("variance_type", "learned variance (" + v->dump() + ") is not supported");
    if (const json* v = r.find("lambda_min_clipped")) {
      if (!(v->is_string() && v->get<std::string>() == "-Infinity"))
        r.fail("lambda_min_clipped", "only -inf (no clipping) is supported");
    }
  }
  return p;
}

}  // namespace kvad::diffusion
