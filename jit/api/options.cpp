// jit/options: reads and validates every FUSEJIT_* variable once; see fusejit/options.h.
#include "fusejit/options.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string_view>

#include <fmt/format.h>

#include "cache/file_io.h"
#include "fusejit/error.h"
#include "templates/arch.h"

extern char** environ;

namespace fusejit {

namespace {

[[noreturn]] void bad_value(std::string_view var, std::string_view value, std::string_view valid) {
  const std::string shown = cache::printable(value);
  throw UsageError(
      fmt::format("{}={}: invalid value '{}'; valid values: {}", var, shown, shown, valid));
}

// Splits "a,b , c" into trimmed, non-empty items.
std::vector<std::string> split_list(std::string_view s) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(start, end - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) items.emplace_back(item);
    start = end + 1;
  }
  return items;
}

bool parse_bool(std::string_view var, std::string_view value) {
  if (value == "1" || value == "on" || value == "true") return true;
  if (value == "0" || value == "off" || value == "false" || value.empty()) return false;
  bad_value(var, value, "1, 0 (also on/off, true/false)");
}

void parse_dump(Options& o, std::string_view value) {
  constexpr std::string_view kValid = "ir, plan, decisions, cuda, ptx, kir, all (comma-separated)";
  for (const std::string& item : split_list(value)) {
    if (item == "ir") o.dump.ir = true;
    else if (item == "plan") o.dump.plan = true;
    else if (item == "decisions") o.dump.decisions = true;
    else if (item == "cuda") o.dump.cuda = true;
    else if (item == "ptx") o.dump.ptx = true;
    else if (item == "kir") o.dump.kir = true;
    else if (item == "all") o.dump = {true, true, true, true, true, true};
    else bad_value("FUSEJIT_DUMP", item, kValid);
  }
}

void parse_disable(Options& o, std::string_view value) {
  constexpr std::string_view kValid =
      "fusion, epilogue, vectorize, passes, memo, dynamic, graphs, sweeps (comma-separated)";
  for (const std::string& item : split_list(value)) {
    if (item == "fusion") o.disable.fusion = true;
    else if (item == "epilogue") o.disable.epilogue = true;
    else if (item == "vectorize") o.disable.vectorize = true;
    else if (item == "passes") o.disable.passes = true;
    else if (item == "memo") o.disable.memo = true;
    else if (item == "dynamic") o.disable.dynamic = true;
    else if (item == "graphs") o.disable.graphs = true;
    else if (item == "sweeps")
      o.disable.sweeps = true;
    else bad_value("FUSEJIT_DISABLE", item, kValid);
  }
}

LogLevel parse_log(std::string_view value) {
  constexpr std::pair<std::string_view, LogLevel> kLevels[] = {
      {"off", LogLevel::off},   {"error", LogLevel::error}, {"warn", LogLevel::warn},
      {"info", LogLevel::info}, {"debug", LogLevel::debug}, {"trace", LogLevel::trace}};
  for (const auto& [name, level] : kLevels) {
    if (value == name) return level;
  }
  bad_value("FUSEJIT_LOG", value, "off, error, warn, info, debug, trace");
}

AttentionMode parse_attention(std::string_view value) {
  if (value == "0" || value == "off" || value == "false") return AttentionMode::off;
  if (value == "kernel") return AttentionMode::kernel;
  if (value == "auto" || value == "1" || value == "on" || value == "true" || value == "cudnn") {
    return AttentionMode::cudnn;
  }
  bad_value("FUSEJIT_ATTENTION", value,
            "auto (also 1, on, true, cudnn), kernel, 0 (also off, false)");
}

GemvMode parse_gemv(std::string_view value) {
  if (value == "0" || value == "off" || value == "false") return GemvMode::off;
  if (value == "auto") return GemvMode::large;
  if (value == "1" || value == "on" || value == "true") return GemvMode::on;
  bad_value("FUSEJIT_GEMV", value,
            "auto (one row against large weights), 1 (also on, true: every GEMM the kernel "
            "takes), 0 (also off, false)");
}

PdlMode parse_pdl(std::string_view value) {
  if (value == "0" || value == "off" || value == "false" || value.empty()) return PdlMode::off;
  if (value == "gemv") return PdlMode::gemv;
  if (value == "1" || value == "all" || value == "on" || value == "true") return PdlMode::all;
  bad_value("FUSEJIT_PDL", value,
            "gemv (the skinny-GEMM kernels only), all (also 1, on, true: every generated "
            "kernel), off (also 0, false)");
}

CacheMode parse_cache(std::string_view value) {
  if (value == "on") return CacheMode::on;
  if (value == "memory") return CacheMode::memory;
  if (value == "off") return CacheMode::off;
  bad_value("FUSEJIT_CACHE", value, "on, memory, off");
}

// The valid values of the counts and caps.
constexpr std::string_view kMegabytes = "a whole number of megabytes, at least 1";
constexpr std::string_view kTraces =
    "a whole number of traces, at least 1 (to keep none, turn the memo off: FUSEJIT_DISABLE=memo)";
constexpr std::string_view kKernels = "a whole number of kernels, at least 1";

// The largest FUSEJIT_CACHE_MAX_MB whose bytes (MB << 20) fit in 64 bits.
constexpr int64_t kMaxCacheMegabytes = static_cast<int64_t>(UINT64_MAX >> 20);

// A whole number from 1 to `max`; a larger one is an error that names the maximum.
int64_t parse_count(std::string_view var, std::string_view value, std::string_view valid,
                    int64_t max = INT64_MAX) {
  int64_t n = 0;
  auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  const bool whole = end == value.data() + value.size();
  if (whole && (ec == std::errc::result_out_of_range || (ec == std::errc() && n > max))) {
    throw UsageError(
        fmt::format("{}={}: out of range; the maximum is {}", var, cache::printable(value), max));
  }
  if (ec != std::errc() || !whole || n < 1) bad_value(var, value, valid);
  return n;
}

Rounding parse_rounding(std::string_view value) {
  if (value == "store") return Rounding::store;
  if (value == "node") return Rounding::node;
  bad_value("FUSEJIT_ROUNDING", value, "store (f16/bf16 rounded where stored), node (every node)");
}

// FUSEJIT_NVRTC_OPTIONS: words separated by white space, each one of kNvrtcOptions. An
// allow-list, not a deny-list: NVRTC has options that change what a kernel computes under
// names no list of bad ones keeps up with (-D redefines any function the source calls, ptxas
// takes --fmad through --ptxas-options). These change how fast NVRTC works, what it reports,
// or how registers are allotted, never a result; they are also part of the cache key.
enum class OptionValue { none, number, choice, ptxas };
struct NvrtcOption {
  std::string_view name;
  OptionValue value;
  std::string_view choices;  // for OptionValue::choice: "0|min|mid|max"
};
constexpr NvrtcOption kNvrtcOptions[] = {
    {"--Ofast-compile", OptionValue::choice, "0|min|mid|max"},
    {"-Ofc", OptionValue::choice, "0|min|mid|max"},
    {"--generate-line-info", OptionValue::none, ""},
    {"-lineinfo", OptionValue::none, ""},
    {"--maxrregcount", OptionValue::number, ""},
    {"-maxrregcount", OptionValue::number, ""},
    {"--extra-device-vectorization", OptionValue::none, ""},
    {"-extra-device-vectorization", OptionValue::none, ""},
    {"--split-compile", OptionValue::number, ""},
    {"-split-compile", OptionValue::number, ""},
    {"--disable-warnings", OptionValue::none, ""},
    {"-w", OptionValue::none, ""},
    {"--ptxas-options", OptionValue::ptxas, ""},
};
// What --ptxas-options may pass, one per --ptxas-options (NVRTC hands ptxas the value as one
// word): reports only.
constexpr std::string_view kPtxasOptions[] = {"-v", "--verbose", "--warn-on-spills",
                                              "--warn-on-local-memory-usage",
                                              "--warn-on-double-precision-use"};

std::string allowed_nvrtc_options() {
  std::string list;
  for (const NvrtcOption& o : kNvrtcOptions) {
    list += list.empty() ? "" : ", ";
    list += o.name;
    if (o.value == OptionValue::number) list += "=N";
    if (o.value == OptionValue::choice) list += fmt::format("={{{}}}", o.choices);
    if (o.value == OptionValue::ptxas) {
      list += "=";
      for (size_t i = 0; i < std::size(kPtxasOptions); ++i) {
        list += fmt::format("{}{}", i == 0 ? "" : "|", kPtxasOptions[i]);
      }
    }
  }
  return list;
}

// Whether `value` is what option `o` takes.
bool takes_value(const NvrtcOption& o, std::string_view value) {
  switch (o.value) {
    case OptionValue::none:
      return false;
    case OptionValue::number: {
      int64_t n = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
      return ec == std::errc() && end == value.data() + value.size() && n >= 1;
    }
    case OptionValue::choice:
      for (std::string_view rest = o.choices;;) {
        const size_t bar = rest.find('|');
        if (!value.empty() && rest.substr(0, bar) == value) return true;
        if (bar == std::string_view::npos) return false;
        rest.remove_prefix(bar + 1);
      }
    case OptionValue::ptxas:
      return std::find(std::begin(kPtxasOptions), std::end(kPtxasOptions), value) !=
             std::end(kPtxasOptions);
  }
  return false;
}

std::vector<std::string> parse_nvrtc_options(const std::string& value) {
  std::vector<std::string> out;
  std::istringstream words(value);
  for (std::string word; words >> word;) {
    const size_t eq = word.find('=');
    const std::string_view name = std::string_view(word).substr(0, eq);
    const auto known = std::find_if(std::begin(kNvrtcOptions), std::end(kNvrtcOptions),
                                    [&](const NvrtcOption& o) { return o.name == name; });
    const bool wants_value = known != std::end(kNvrtcOptions) && known->value != OptionValue::none;
    const std::string_view given =
        eq == std::string::npos ? std::string_view() : std::string_view(word).substr(eq + 1);
    const bool ok =
        known != std::end(kNvrtcOptions) &&
        (eq == std::string::npos ? !wants_value : wants_value && takes_value(*known, given));
    if (!ok) {
      throw UsageError(fmt::format(
          "FUSEJIT_NVRTC_OPTIONS: {} is not accepted: only options that cannot change what a "
          "kernel computes are (the arch is FUSEJIT_ARCH's, numerics FUSEJIT_ROUNDING's); "
          "accepted: {}",
          cache::printable(word), allowed_nvrtc_options()));
    }
    out.push_back(std::move(word));
  }
  return out;
}

// A real arch (sm_NN, sm_90a): the runtime compiles SASS for it.
std::string parse_arch(std::string_view value) {
  bool real = false;
  try {
    real = templates::parse_arch(value).real;
  } catch (const UsageError&) {
  }
  if (!real) bad_value("FUSEJIT_ARCH", value, "sm_NN such as sm_80, sm_90, sm_90a, sm_100");
  return std::string(value);
}

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::string(xdg) + "/fusejit";
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    return std::string(home) + "/.cache/fusejit";
  }
  return ".fusejit-cache";
}

constexpr std::string_view kKnownVars =
    "FUSEJIT_DUMP, FUSEJIT_DUMP_DIR, FUSEJIT_LOG, FUSEJIT_CACHE_DIR, FUSEJIT_CACHE, "
    "FUSEJIT_CACHE_MAX_MB, FUSEJIT_MEMO_MAX, FUSEJIT_KERNELS_MAX, FUSEJIT_RECORD_DIR, "
    "FUSEJIT_REQUIRE_WARM, FUSEJIT_DISABLE, FUSEJIT_ARCH, FUSEJIT_TF32, FUSEJIT_GEMV, FUSEJIT_PDL, "
    "FUSEJIT_ROUNDING, FUSEJIT_CUDNN_PATH, FUSEJIT_ATTENTION, FUSEJIT_NVRTC_OPTIONS, "
    "FUSEJIT_DYNAMO_REPLAY";

}  // namespace

Options Options::parse(const std::vector<std::pair<std::string, std::string>>& vars) {
  Options o;
  o.cache_dir = default_cache_dir();
  for (const auto& [name, value] : vars) {
    if (name == "FUSEJIT_DUMP") parse_dump(o, value);
    else if (name == "FUSEJIT_DUMP_DIR") o.dump_dir = value.empty() ? o.dump_dir : value;
    else if (name == "FUSEJIT_LOG") o.log_level = parse_log(value);
    else if (name == "FUSEJIT_CACHE_DIR") o.cache_dir = value.empty() ? o.cache_dir : value;
    else if (name == "FUSEJIT_CACHE") o.cache = parse_cache(value);
    else if (name == "FUSEJIT_CACHE_MAX_MB")
      o.cache_max_mb = parse_count(name, value, kMegabytes, kMaxCacheMegabytes);
    else if (name == "FUSEJIT_MEMO_MAX") o.memo_max = parse_count(name, value, kTraces);
    else if (name == "FUSEJIT_KERNELS_MAX") o.kernels_max = parse_count(name, value, kKernels);
    else if (name == "FUSEJIT_RECORD_DIR") o.record_dir = value;
    else if (name == "FUSEJIT_REQUIRE_WARM") o.require_warm = parse_bool(name, value);
    else if (name == "FUSEJIT_DISABLE") parse_disable(o, value);
    else if (name == "FUSEJIT_ARCH") o.arch = value.empty() ? "" : parse_arch(value);
    else if (name == "FUSEJIT_TF32") o.allow_tf32 = parse_bool(name, value);
    else if (name == "FUSEJIT_GEMV") o.gemv = parse_gemv(value);
    else if (name == "FUSEJIT_PDL")
      o.pdl = parse_pdl(value);
    else if (name == "FUSEJIT_GEMV_PROLOGUE")
      o.gemv_prologue = parse_bool(name, value);
    else if (name == "FUSEJIT_GEMV_EPILOGUE")
      o.gemv_epilogue = parse_bool(name, value);
    else if (name == "FUSEJIT_GEMV_RING")
      o.gemv_ring = parse_bool(name, value);
    else if (name == "FUSEJIT_ATTENTION") o.attention = parse_attention(value);
    else if (name == "FUSEJIT_ROUNDING") o.rounding = parse_rounding(value);
    else if (name == "FUSEJIT_CUDNN_PATH") o.cudnn_path = value;
    else if (name == "FUSEJIT_NVRTC_OPTIONS") o.nvrtc_options = parse_nvrtc_options(value);
    else if (name == "FUSEJIT_DYNAMO_REPLAY")
      parse_bool(name, value);                           // the Python backend's
    else if (name == "FUSEJIT_UPDATE_GOLDEN") continue;  // read by the golden-kernel tests
    else if (name.starts_with("FUSEJIT_")) {
      o.warnings.push_back(fmt::format(
          "{} is not a fusejit variable (a typo, or one of a newer version?); ignored; known "
          "variables: {}",
          cache::printable(name), kKnownVars));
    }
  }
  return o;
}

Options Options::from_env() {
  std::vector<std::pair<std::string, std::string>> vars;
  for (char** e = environ; e && *e; ++e) {
    std::string_view entry(*e);
    if (!entry.starts_with("FUSEJIT_")) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    vars.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return parse(vars);
}

}  // namespace fusejit
