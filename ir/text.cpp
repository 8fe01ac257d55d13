// ir/text: the trace printer and parser; docs/trace-format.md is the grammar, text.h the API.
//
// The printer writes the canonical form: dense ids, one space between tokens, shortest
// round-trip numbers. The parser is a little more forgiving about spaces (runs of spaces or tabs
// between tokens), but every node goes through Graph::add and its stated type is checked against
// the inferred one, so what it accepts is always a well-formed graph. Parsing does not verify
// anything else (verify.h does).
#include "ir/text.h"

#include <cerrno>
#include <charconv>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "fusejit/error.h"
#include "ir/dtype.h"
#include "ir/printable.h"
#include "ir/shape.h"
#include "ir/symbolic.h"

namespace fusejit::ir {

namespace {

constexpr std::string_view kHeader = "fusejit-trace";

// Shortest decimal that reads back to the same double, independent of the locale.
std::string number_str(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// Ops that work along one axis spell it `axis=N` rather than `axes=[N]`.
bool takes_axis(Op op) { return op == Op::slice || op == Op::concat || op == Op::update_slice; }

void print_node(std::string& out, size_t id, const Node& n, const std::vector<Symbol>& symbols,
                bool newline = true) {
  fmt::format_to(std::back_inserter(out), "%{} : {} = {}", id, type_str(n, symbols),
                 op_name(n.op));
  if (n.op == Op::constant) {
    out += ' ';
    out += is_floating(n.dtype) ? number_str(n.value) : std::to_string(n.integer);
  }
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}%{}", i == 0 ? " " : ", ", n.inputs[i]);
  }
  if (takes_axis(n.op)) {
    fmt::format_to(std::back_inserter(out), " axis={}", n.axes.at(0));
  } else if (!n.axes.empty()) {
    // A scalar's permutation is empty and prints as nothing; parsing no axes gives it back.
    fmt::format_to(std::back_inserter(out), " axes=[{}]", fmt::join(n.axes, ","));
  }
  if (n.op == Op::slice) fmt::format_to(std::back_inserter(out), " start={} step={}", n.start, n.step);
  if (n.keepdim) out += " keepdim";
  if (newline) out += '\n';
}

// Trace text quoted in an error message: in single quotes, bytes outside printable ASCII as
// \xNN (a binary file's bytes never reach a terminal raw), at most kQuotedBytes of it.
constexpr size_t kQuotedBytes = 40;

std::string quoted(std::string_view text) {
  if (text.size() <= kQuotedBytes) return fmt::format("'{}'", printable(text));
  return fmt::format("'{}'... ({} bytes)", printable(text.substr(0, kQuotedBytes)), text.size());
}

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// What "found '...'" quotes: a run of word characters and the punctuation of ids and numbers.
bool continues_token(char c) {
  return is_word_char(c) || c == '%' || c == '.' || c == '+' || c == '-';
}

// A cursor over one line. Every error it raises names the source, the line and the column
// (1-based, in bytes) and what was found there.
class Cursor {
 public:
  Cursor(std::string_view line, int line_no, std::string_view source)
      : line_(line), line_no_(line_no), source_(source) {}

  // Skips spaces and returns where the next token starts, for errors that point at it.
  size_t mark() {
    while (pos_ < line_.size() && (line_[pos_] == ' ' || line_[pos_] == '\t')) ++pos_;
    return pos_;
  }
  bool at_end() { return mark() == line_.size(); }
  bool peek(char c) { return !at_end() && line_[pos_] == c; }
  bool peek_digit() { return !at_end() && line_[pos_] >= '0' && line_[pos_] <= '9'; }
  bool accept(char c) {
    if (!peek(c)) return false;
    ++pos_;
    return true;
  }
  void expect(char c, std::string_view context) {
    if (!accept(c)) fail(fmt::format("expected '{}' {}, found {}", c, context, found()));
  }

  // A run of letters, digits and underscores; empty when there is none.
  std::string_view word() {
    const size_t start = mark();
    while (pos_ < line_.size() && is_word_char(line_[pos_])) ++pos_;
    return line_.substr(start, pos_ - start);
  }
  // A run of anything but spaces, for numbers.
  std::string_view token() {
    const size_t start = mark();
    while (pos_ < line_.size() && line_[pos_] != ' ' && line_[pos_] != '\t') ++pos_;
    return line_.substr(start, pos_ - start);
  }

  // A decimal integer, optionally negative; `what` names it in errors.
  int64_t integer(std::string_view what, bool allow_negative) {
    return decimal<int64_t>(what, allow_negative);
  }
  // A decimal integer in [0, 2^64): a random op's seed or offset.
  uint64_t unsigned_integer(std::string_view what) { return decimal<uint64_t>(what, false); }

  // "%" DIGITS: a node label.
  int64_t label() {
    const size_t start = mark();
    if (start + 1 >= line_.size() || line_[start] != '%' || line_[start + 1] < '0' ||
        line_[start + 1] > '9') {
      fail(fmt::format("expected an id such as %0, found {}", found()));
    }
    ++pos_;
    return integer("an id", false);
  }

  // What the next token is, quoted, for "expected X, found Y".
  std::string found() {
    if (at_end()) return "end of line";
    size_t end = pos_;
    while (end < line_.size() && continues_token(line_[end])) ++end;
    if (end == pos_) ++end;
    return quoted(line_.substr(pos_, std::min<size_t>(end - pos_, 32)));
  }

  [[noreturn]] void fail(const std::string& what) { fail_at(pos_, what); }
  [[noreturn]] void fail_at(size_t pos, const std::string& what) const {
    // Every quote of the line goes through quoted(); escaping the whole message again keeps any
    // raw byte that reaches it some other way off the caller's terminal.
    throw UsageError(fmt::format("{}:{}:{}: {}", source_, line_no_, pos + 1, printable(what)));
  }
  void seek(size_t pos) { pos_ = pos; }

 private:
  template <class T>
  T decimal(std::string_view what, bool allow_negative) {
    const size_t start = mark();
    if (allow_negative && pos_ < line_.size() && line_[pos_] == '-') ++pos_;
    while (pos_ < line_.size() && line_[pos_] >= '0' && line_[pos_] <= '9') ++pos_;
    T v = 0;
    const auto [end, ec] = std::from_chars(line_.data() + start, line_.data() + pos_, v);
    if (ec == std::errc::result_out_of_range) {
      fail_at(start,
              fmt::format("{} {} is out of range", what, quoted(line_.substr(start, pos_ - start))));
    }
    if (ec != std::errc() || end != line_.data() + pos_) {
      pos_ = start;
      fail(fmt::format("expected {}, found {}", what, found()));
    }
    return v;
  }

  std::string_view line_;
  int line_no_;
  std::string_view source_;
  size_t pos_ = 0;
};

struct Type {
  DType dtype = DType::f32;
  Shape shape;
};

// A static factor of a dim that is a multiple of a symbol's sentinel: the parse starts over with
// other sentinels (ir/symbolic.h).
struct SentinelClash {
  int64_t sentinel;
};

// TERM ("*" TERM)*, TERM := INT | NAME (a symbol of the `dynamic` line): the dim encoded.
int64_t parse_dim(Cursor& c, const std::vector<Symbol>& symbols) {
  int64_t dim = 1;
  do {
    const size_t pos = c.mark();
    int64_t factor = 0;
    if (c.peek_digit()) {
      factor = c.integer("a dimension (a positive integer or a dynamic dim's name)", false);
      for (const Symbol& s : symbols) {
        // 0 is a multiple of every sentinel, but no product with a symbol can be mistaken for it.
        if (factor != 0 && factor % s.sentinel == 0) throw SentinelClash{s.sentinel};
      }
    } else {
      const std::string_view name = c.word();
      const auto it = std::find_if(symbols.begin(), symbols.end(),
                                   [&](const Symbol& s) { return s.name == name; });
      if (name.empty() || it == symbols.end()) {
        c.seek(pos);
        c.fail(fmt::format("expected a dimension (a positive integer{}), found {}",
                           symbols.empty() ? "" : " or a dynamic dim of the 'dynamic' line",
                           c.found()));
      }
      factor = it->sentinel;
    }
    const std::optional<int64_t> product = checked_mul(dim, factor);
    if (!product) c.fail_at(pos, "dimension out of range (a dim's product overflows 64 bits)");
    dim = *product;
  } while (c.accept('*'));
  return dim;
}

// DTYPE "[" (DIM ("," DIM)*)? "]"
Type parse_type(Cursor& c, const std::vector<Symbol>& symbols) {
  const size_t start = c.mark();
  const std::string_view name = c.word();
  if (name.empty()) c.fail(fmt::format("expected a type such as f32[4,8], found {}", c.found()));
  const std::optional<DType> dtype = parse_dtype(name);
  if (!dtype) c.fail_at(start, fmt::format("unknown dtype '{}'; valid: {}", name, dtype_names()));
  Type t{*dtype, {}};
  c.expect('[', fmt::format("after the dtype {}", name));
  if (c.accept(']')) return t;
  do {
    t.shape.push_back(parse_dim(c, symbols));
  } while (c.accept(','));
  c.expect(']', "or ',' in the shape");
  return t;
}

// A constant's value: the shortest round-trip decimal, or inf, -inf, nan.
double parse_number(Cursor& c) {
  const size_t start = c.mark();
  const std::string_view tok = c.token();
  if (tok == "inf") return std::numeric_limits<double>::infinity();
  if (tok == "-inf") return -std::numeric_limits<double>::infinity();
  if (tok == "nan") return std::numeric_limits<double>::quiet_NaN();
  double v = 0;
  const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), v);
  if (ec == std::errc::result_out_of_range) {
    c.fail_at(start, fmt::format("number {} is out of range for a double", quoted(tok)));
  }
  if (tok.empty() || ec != std::errc() || end != tok.data() + tok.size() || std::isnan(v) ||
      std::isinf(v)) {
    c.fail_at(start, fmt::format("expected a number (such as 1.5, -2, 1e-30, inf, -inf or nan), "
                                 "found {}",
                                 tok.empty() ? "end of line" : quoted(tok)));
  }
  return v;
}

// Builds the graph line by line. Labels map to dense ids in file order.
class Parser {
 public:
  Parser(std::string_view source, std::vector<int64_t> excluded)
      : source_(source), excluded_(std::move(excluded)) {}

  SymbolicGraph run(std::string_view text) {
    int line_no = 0;
    size_t start = 0;
    while (start < text.size()) {
      size_t end = text.find('\n', start);
      if (end == std::string_view::npos) end = text.size();
      std::string_view line = text.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      parse_line(line, ++line_no);
      start = end + 1;
    }
    if (line_no == 0) parse_line("", ++line_no);  // empty text: report the missing header
    if (output_line_ == 0) {
      throw UsageError(
          fmt::format("{}:{}:1: missing output line; a trace ends with 'output %id, ...' "
                      "naming its results",
                      source_, line_no + 1));
    }
    return canonical(SymbolicGraph{std::move(graph_), std::move(symbols_)});
  }

 private:
  void parse_line(std::string_view line, int line_no) {
    Cursor c(line, line_no, source_);
    current_line_ = line_no;
    if (line_no == 1) return parse_header(c);
    if (c.at_end() || c.peek('#')) return;  // blank line or whole-line comment
    if (version_ >= 2 && graph_.size() == 0 && symbols_.empty()) {
      const size_t start = c.mark();
      if (c.word() == "dynamic") return parse_dynamic(c);
      c.seek(start);
    }
    if (output_line_ != 0) {
      c.fail(
          fmt::format("unexpected {} after the output line (line {}); the output line comes "
                      "last",
                      c.found(), output_line_));
    }
    if (c.peek('%')) return parse_node(c);
    const size_t start = c.mark();
    if (c.word() == "output") return parse_output(c);
    c.seek(start);
    c.fail(fmt::format("expected a node ('%id : type = op ...') or the output line, found {}",
                       c.found()));
  }

  void parse_header(Cursor& c) {
    const std::string expected =
        fmt::format("expected '{} 1' (or {} with dynamic dims) as the first line", kHeader, kTraceFormatVersion);
    const size_t start = c.mark();
    const std::string_view magic = c.token();
    if (magic != kHeader) {
      c.fail_at(start, fmt::format("{}, found {}", expected,
                                   magic.empty() ? "an empty line" : quoted(magic)));
    }
    const size_t vpos = c.mark();
    const std::string_view version = c.token();
    if (version == "1" || version == "2") {
      version_ = version[0] - '0';
    } else {
      c.fail_at(vpos, fmt::format("unsupported trace format version {}; {} (this build reads "
                                  "versions 1 and 2)",
                                  version.empty() ? "(none)" : quoted(version),
                                  expected));
    }
    if (!c.at_end()) c.fail(fmt::format("unexpected {} after the header", c.found()));
  }

  // "dynamic" NAME "=" INT ("," NAME "=" INT)*: the dynamic dims and an example value of each.
  void parse_dynamic(Cursor& c) {
    do {
      const size_t pos = c.mark();
      const std::string_view name = c.word();
      if (name.empty() || (name[0] >= '0' && name[0] <= '9')) {
        c.seek(pos);
        c.fail(fmt::format("expected a dynamic dim's name (a letter, then letters, digits or "
                           "_), found {}",
                           c.found()));
      }
      if (std::any_of(symbols_.begin(), symbols_.end(),
                      [&](const Symbol& s) { return s.name == name; })) {
        c.fail_at(pos, fmt::format("dynamic dim {} is declared twice", name));
      }
      if (symbols_.size() == kMaxDynamicDims) {
        c.fail_at(pos, fmt::format("dynamic dim {} is one too many: a trace has at most {} "
                                   "dynamic dims; make the others static",
                                   name, kMaxDynamicDims));
      }
      c.expect('=', fmt::format("after {} (an example value: {}=8)", name, name));
      const int64_t example = c.integer("an example value (an integer of at least 2)", false);
      if (example < 2) c.fail_at(pos, fmt::format("{}={}: an example value is at least 2", name, example));
      symbols_.push_back({.name = std::string(name), .sentinel = 0, .example = example});
    } while (c.accept(','));
    if (!c.at_end()) c.fail(fmt::format("unexpected {} on the dynamic line", c.found()));
    const std::vector<int64_t> primes = choose_sentinels(symbols_.size(), excluded_);
    for (size_t k = 0; k < symbols_.size(); ++k) symbols_[k].sentinel = primes.at(k);
  }

  std::string shape_text(const Shape& shape) const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) {
      if (i > 0) s += ',';
      s += dim_str(shape[i], symbols_);
    }
    return s + "]";
  }

  // ID ":" TYPE "=" OP operands attrs
  void parse_node(Cursor& c) {
    const size_t label_pos = c.mark();
    const int64_t label = c.label();
    if (auto it = ids_.find(label); it != ids_.end()) {
      c.fail_at(label_pos, fmt::format("duplicate id %{}: it is already defined on line {}", label,
                                       it->second.line));
    }
    c.expect(':', "after the id");
    const size_t type_pos = c.mark();
    const Type stated = parse_type(c, symbols_);
    c.expect('=', "after the type");
    const size_t op_pos = c.mark();
    const std::string_view name = c.word();
    if (name.empty()) c.fail(fmt::format("expected an op name, found {}", c.found()));
    const std::optional<Op> op = parse_op(name);
    if (!op) {
      c.fail_at(op_pos, fmt::format("unknown op '{}' (docs/trace-format.md lists the ops)", name));
    }

    NodeSpec spec{.op = *op};
    switch (*op) {
      case Op::input:
        spec.dtype = stated.dtype;
        spec.shape = stated.shape;
        break;
      case Op::constant:
        spec.dtype = stated.dtype;
        parse_constant(c, stated.dtype, spec);
        break;
      case Op::cast:
        spec.dtype = stated.dtype;
        break;
      case Op::arange:
        spec.dtype = stated.dtype;
        spec.shape = stated.shape;
        break;
      case Op::reshape:
      case Op::expand:
      case Op::slice:
        spec.shape = stated.shape;
        break;
      case Op::rand:
      case Op::randn:
        spec.dtype = stated.dtype;
        spec.shape = stated.shape;
        break;
      default:
        break;
    }
    parse_operands(c, spec.inputs);
    parse_attrs(c, spec);
    if (!c.at_end()) c.fail(fmt::format("unexpected {} at the end of the node", c.found()));

    NodeId id = 0;
    try {
      id = graph_.add(spec);
    } catch (const Error& e) {
      // Dims of dynamic symbols are their sentinels here: say B, not 32749.
      c.fail_at(op_pos, symbols_.empty() ? std::string(e.what()) : symbolize(e.what(), symbols_));
    }
    const Node& n = graph_.node(id);
    if (n.op == Op::concat && !symbols_.empty()) check_concat_extents(c, op_pos, n);
    if (n.dtype != stated.dtype || n.shape != stated.shape) {
      c.fail_at(type_pos,
                fmt::format("the stated type {}{} differs from the type inferred for "
                            "{}: {}",
                            dtype_name(stated.dtype), shape_text(stated.shape), name,
                            type_str(n, symbols_)));
    }
    ids_.emplace(label, Label{id, current_line_});
  }

  // A concat adds its operands' extents along its axis. With dynamic dims the sum must again be
  // a product (B + B is 2*B; B + 3 is no dim of the format): without this check the sum would
  // be a meaningless number standing for no size, shown in messages as if it were one.
  void check_concat_extents(Cursor& c, size_t op_pos, const Node& n) {
    const size_t axis = static_cast<size_t>(n.axes[0]);
    const std::vector<int> form =
        dim_terms(graph_.node(n.inputs[0]).shape[axis], symbols_).exponents;
    for (NodeId in : n.inputs) {
      if (dim_terms(graph_.node(in).shape[axis], symbols_).exponents == form) continue;
      std::vector<std::string> extents;
      for (NodeId k : n.inputs) extents.push_back(dim_str(graph_.node(k).shape[axis], symbols_));
      c.fail_at(op_pos, fmt::format("concat along axis {}: the extents {} add up to no dim of the "
                                    "dynamic dims (only extents of one form add: B and 2*B make "
                                    "3*B, B and 3 make none); concat along a static axis",
                                    axis, fmt::join(extents, " + ")));
    }
  }

  // NUMBER into spec.value; an integral constant written as a plain decimal integer also into
  // spec.integer, exactly (through a double it would lose the digits past 2^53).
  void parse_constant(Cursor& c, DType dtype, NodeSpec& spec) {
    const size_t pos = c.mark();
    if (is_integral(dtype)) {
      const std::string_view tok = c.token();
      int64_t exact = 0;
      const auto [end, ec] = std::from_chars(tok.data(), tok.data() + tok.size(), exact);
      if (!tok.empty() && end == tok.data() + tok.size()) {
        if (ec == std::errc::result_out_of_range) {
          c.fail_at(pos, fmt::format("const: {} is out of range for {} (a 64-bit integer)", tok,
                                     dtype_name(dtype)));
        }
        // A literal the dtype cannot hold is a mistake in the trace, not a value to wrap.
        if (dtype == DType::i32 && (exact < INT32_MIN || exact > INT32_MAX)) {
          c.fail_at(pos, fmt::format("const: {} is out of range for i32 (-2147483648 to "
                                     "2147483647)", tok));
        }
        spec.integer = exact;
        spec.value = static_cast<double>(exact);
        return;
      }
      c.seek(pos);  // not a plain integer: a number such as 1e+05, checked below
    }
    spec.value = read_number(c, dtype, pos);
  }

  double read_number(Cursor& c, DType dtype, size_t pos) {
    const double v = parse_number(c);
    const bool ok = dtype == DType::boolean ? (v == 0.0 || v == 1.0)
                    : is_integral(dtype)    ? std::isfinite(v) && std::trunc(v) == v
                                            : true;
    if (!ok) {
      c.fail_at(pos, fmt::format("const: {} is not a valid {} value ({})", number_str(v),
                                 dtype_name(dtype),
                                 dtype == DType::boolean ? "use 0 or 1" : "expected an integer"));
    }
    const bool in_range = dtype == DType::i32   ? v >= -0x1p31 && v < 0x1p31
                          : dtype == DType::i64 ? v >= -0x1p63 && v < 0x1p63
                                                : true;
    if (!in_range) {
      c.fail_at(pos, fmt::format("const: {} is out of range for {}", number_str(v),
                                 dtype_name(dtype)));
    }
    return v;
  }

  // (ID ("," ID)*)?
  void parse_operands(Cursor& c, std::vector<NodeId>& inputs) {
    if (!c.peek('%')) return;
    do {
      inputs.push_back(resolve(c));
    } while (c.accept(','));
  }

  // INT after `word=`, for attributes that take one.
  int64_t parse_int_attr(Cursor& c, std::string_view word) {
    c.expect('=', fmt::format("after {}", word));
    return c.integer(fmt::format("an integer after {}=", word), true);
  }

  // slice: "axis=" INT "start=" INT "step=" INT; concat, update_slice: "axis=" INT.
  void parse_axis_attrs(Cursor& c, NodeSpec& spec) {
    const std::string_view name = op_name(spec.op);
    for (std::string_view want : {"axis", "start", "step"}) {
      if (want != "axis" && spec.op != Op::slice) break;
      const size_t pos = c.mark();
      const std::string_view attr = c.word();
      if (attr != want) {
        c.fail_at(pos, fmt::format("expected {}=N after the operands of {}, found {}", want, name,
                                   attr.empty() ? c.found() : quoted(attr)));
      }
      const int64_t v = parse_int_attr(c, want);
      if (want == "axis") spec.axes = {v};
      else if (want == "start") spec.start = v;
      else spec.step = v;
    }
  }

  // ("axes=[" INT ("," INT)* "]")? ("keepdim")?, parse_axis_attrs' for slice and concat, or a
  // random op's attribute key (below)
  void parse_attrs(Cursor& c, NodeSpec& spec) {
    if (takes_axis(spec.op)) return parse_axis_attrs(c, spec);
    const OpKind kind = op_kind(spec.op);
    const std::string_view name = op_name(spec.op);
    size_t pos = c.mark();
    std::string_view attr = c.word();
    if (attr == "axes") {
      if (kind != OpKind::reduce && spec.op != Op::permute && kind != OpKind::gather) {
        c.fail_at(pos, fmt::format("'{}' takes no axes=[...]; only reductions, permute and "
                                   "gather do",
                                   name));
      }
      c.expect('=', "after axes");
      c.expect('[', "after axes=");
      if (!c.accept(']')) {
        do {
          spec.axes.push_back(c.integer("an axis (an integer)", true));
        } while (c.accept(','));
        c.expect(']', "or ',' in the axes");
      }
      pos = c.mark();
      attr = c.word();
    }
    if (kind == OpKind::random && attr == "seed" && spec.inputs.empty()) {
      return parse_attribute_key(c, spec);
    }
    if (attr == "keepdim") {
      if (kind != OpKind::reduce) {
        c.fail_at(pos, fmt::format("'{}' takes no keepdim; only reductions do", name));
      }
      spec.keepdim = true;
    } else if (!attr.empty()) {
      c.fail_at(pos, fmt::format("unexpected '{}' after the operands of {}", attr, name));
    }
  }

  // "seed=" UINT SP "offset=" UINT, after the seed word: the spelling of builds in which the
  // key was an attribute of rand and randn (no operands). Read as a key of its own, an i64[2]
  // input inserted just before the node; the values are dropped, since a trace holds no input
  // data (they are bound at eval like any input's), and the node prints in the operand spelling.
  void parse_attribute_key(Cursor& c, NodeSpec& spec) {
    parse_counter(c, "seed");
    const size_t pos = c.mark();
    if (c.word() != "offset") c.fail_at(pos, "expected offset=N after the seed");
    parse_counter(c, "offset");
    spec.inputs = {add_input(graph_, DType::i64, {2})};
  }

  // "=" UINT, after the word `what`.
  static uint64_t parse_counter(Cursor& c, std::string_view what) {
    c.expect('=', fmt::format("after {}", what));
    return c.unsigned_integer(fmt::format("the {} (an integer in [0, 2^64))", what));
  }

  // "output" ID ("," ID)*
  void parse_output(Cursor& c) {
    std::vector<NodeId> outputs;
    do {
      outputs.push_back(resolve(c));
    } while (c.accept(','));
    if (!c.at_end()) c.fail(fmt::format("unexpected {} at the end of the output line", c.found()));
    graph_.set_outputs(std::move(outputs));
    output_line_ = current_line_;
  }

  NodeId resolve(Cursor& c) {
    const size_t pos = c.mark();
    const int64_t label = c.label();
    const auto it = ids_.find(label);
    if (it == ids_.end()) {
      c.fail_at(pos,
                fmt::format("undefined id %{}; an id must be defined on an earlier line", label));
    }
    return it->second.id;
  }

  struct Label {
    NodeId id;
    int line;
  };
  std::string_view source_;
  std::vector<int64_t> excluded_;  // primes that static dims are multiples of: no sentinels
  int version_ = 1;
  std::vector<Symbol> symbols_;
  Graph graph_;
  std::unordered_map<int64_t, Label> ids_;
  int output_line_ = 0;
  int current_line_ = 0;
};

}  // namespace

std::string print(const SymbolicGraph& sym) {
  const Graph& g = sym.graph;
  std::string out = fmt::format("{} {}\n", kHeader, sym.symbols.empty() ? 1 : 2);
  for (size_t k = 0; k < sym.symbols.size(); ++k) {
    fmt::format_to(std::back_inserter(out), "{}{}={}", k == 0 ? "dynamic " : ", ",
                   sym.symbols[k].name, sym.symbols[k].example);
  }
  if (!sym.symbols.empty()) out += '\n';
  for (size_t i = 0; i < g.size(); ++i) print_node(out, i, g.nodes()[i], sym.symbols);
  out += "output";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    fmt::format_to(std::back_inserter(out), "{}%{}", i == 0 ? " " : ", ", g.outputs()[i]);
  }
  out += '\n';
  return out;
}

std::string print(const Graph& g) { return print(SymbolicGraph{g, {}}); }

std::string node_line(const Graph& g, NodeId id) {
  std::string out;
  print_node(out, static_cast<size_t>(id), g.node(id), {}, false);
  return out;
}

SymbolicGraph parse_symbolic(std::string_view text, std::string_view source) {
  std::vector<int64_t> excluded;
  for (;;) {
    try {
      return Parser(source, excluded).run(text);
    } catch (const SentinelClash& clash) {
      excluded.push_back(clash.sentinel);  // a static dim is a multiple of it: pick another
      // Each clash rules out one prime of the thousands below 2^15; a trace that needs this many
      // has static dims built to collide with them.
      if (excluded.size() > 256) {
        throw UsageError(fmt::format("{}: the static dims are multiples of {} candidate stand-ins "
                                     "for the dynamic dims; write those dims in terms of the "
                                     "dynamic ones",
                                     source, excluded.size()));
      }
    }
  }
}

Graph parse(std::string_view text, std::string_view source) {
  SymbolicGraph sym = parse_symbolic(text, source);
  if (sym.symbols.empty()) return std::move(sym.graph);
  return instantiate(sym.graph, sym.symbols, examples(sym.symbols));
}

SymbolicGraph parse_symbolic_file(const std::string& path) {
  return parse_symbolic(read_trace_file(path), path);
}

std::string read_trace_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw UsageError(fmt::format("cannot read trace file '{}': {}", path, std::strerror(errno)));
  }
  // Read in chunks up to a bound, so that a device (/dev/zero), a pipe that never ends or a
  // binary file is refused with its reason instead of exhausting memory.
  std::string text;
  std::vector<char> chunk(size_t{1} << 20);
  while (in) {
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    const size_t got = static_cast<size_t>(in.gcount());
    if (const void* nul = std::memchr(chunk.data(), '\0', got)) {
      throw UsageError(fmt::format(
          "'{}' is not a trace: it holds a NUL byte at offset {} (a trace is text; "
          "docs/trace-format.md)",
          path, text.size() + static_cast<size_t>(static_cast<const char*>(nul) - chunk.data())));
    }
    if (text.size() + got > kMaxTraceBytes) {
      throw UsageError(fmt::format("trace file '{}' is larger than {} MiB, the most a trace may "
                                   "be; split the program into smaller traces",
                                   path, kMaxTraceBytes >> 20));
    }
    text.append(chunk.data(), got);
  }
  if (in.bad()) throw UsageError(fmt::format("cannot read trace file '{}': read failed", path));
  return text;
}

Graph parse_file(const std::string& path) { return parse(read_trace_file(path), path); }

}  // namespace fusejit::ir
