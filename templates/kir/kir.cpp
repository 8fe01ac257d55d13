// templates/kir: building, walking, checking and printing the kernel IR; see kir.h.
#include "templates/kir/kir.h"

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>

#include <fmt/ranges.h>

#include "fusejit/error.h"

namespace fusejit::templates::kir {

namespace {

ExprP make(ExprKind kind, std::string text, std::vector<ExprP> args) {
  auto e = std::make_shared<Expr>();
  e->kind = kind;
  e->text = std::move(text);
  e->args = std::move(args);
  return e;
}

Stmt stmt(StmtKind kind) {
  Stmt s;
  s.kind = kind;
  return s;
}

}  // namespace

namespace {

// A C literal of the forms kernels use: a number (decimal, hex, hex float, with suffixes), a
// negative one or INT_MIN's spelling in parentheses, true or false, a float from its bits, or
// a braced list of those (a pair's or triple's initial value, such as a Welford identity).
bool is_literal(const std::string& text) {
  static const std::regex kLiteral(
      R"(true|false|__uint_as_float\(0x[0-9a-f]+u\)|)"
      R"(\(?-?(0x[0-9a-fA-F.]+(p[+-]?[0-9]+)?|[0-9][0-9.]*(e[+-]?[0-9]+)?)[uUlLfF]*( - 1)?\)?)");
  if (text.size() >= 2 && text.front() == '{' && text.back() == '}') {
    const std::string items = text.substr(1, text.size() - 2);
    for (size_t start = 0;;) {
      const size_t comma = items.find(", ", start);
      if (!std::regex_match(items.substr(start, comma - start), kLiteral)) return false;
      if (comma == std::string::npos) return true;
      start = comma + 2;
    }
  }
  return std::regex_match(text, kLiteral);
}

}  // namespace

VarP variable(std::string type, std::string name) {
  return std::make_shared<const Var>(Var{std::move(name), std::move(type)});
}
ExprP var(VarP v) {
  if (!v) throw InternalError("kernel IR: a read of no variable");
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::var;
  e->var = std::move(v);
  return e;
}
ExprP lit(std::string text) {
  if (!is_literal(text)) {
    throw InternalError(
        fmt::format("kernel IR: `{}` is not a literal (variables are var nodes, "
                    "built-ins and device operations typed nodes)",
                    text));
  }
  return make(ExprKind::lit, std::move(text), {});
}
ExprP lit(int64_t value) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::lit;
  e->text = std::to_string(value);
  e->number = value;  // the integer it is (symbolic_constant checks it)
  return e;
}
ExprP call(std::string fn, std::vector<ExprP> args) {
  return make(ExprKind::call, std::move(fn), std::move(args));
}
ExprP infix(ExprP lhs, std::string op, ExprP rhs) {
  return make(ExprKind::infix, std::move(op), {std::move(lhs), std::move(rhs)});
}
ExprP prefix(std::string op, ExprP e) {
  return make(ExprKind::prefix, std::move(op), {std::move(e)});
}
ExprP select(ExprP cond, ExprP then, ExprP otherwise) {
  return make(ExprKind::select, {}, {std::move(cond), std::move(then), std::move(otherwise)});
}
ExprP group(ExprP e) { return make(ExprKind::group, {}, {std::move(e)}); }
ExprP subscript(ExprP array, ExprP index) {
  return make(ExprKind::subscript, {}, {std::move(array), std::move(index)});
}
ExprP cast(std::string type, ExprP value) {
  return make(ExprKind::cast, std::move(type), {std::move(value)});
}
ExprP offset(const Index& at, bool lane0) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::offset;
  e->at = at;
  e->lane0 = lane0;
  return e;
}
ExprP extent(int64_t n) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::extent;
  e->number = n;
  return e;
}

ExprP builtin(Builtin which) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::builtin;
  e->number = static_cast<int64_t>(which);
  return e;
}
ExprP thread_index() { return builtin(Builtin::thread_index); }
ExprP block_index() { return builtin(Builtin::block_index); }
ExprP grid_blocks() { return builtin(Builtin::grid_blocks); }

namespace {

ExprP intrinsic(Intrinsic which, std::vector<ExprP> args, std::vector<int64_t> numbers = {}) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::intrinsic;
  e->number = static_cast<int64_t>(which);
  e->args = std::move(args);
  e->numbers = std::move(numbers);
  return e;
}

}  // namespace

ExprP sync_block() { return intrinsic(Intrinsic::sync_block, {}); }
ExprP sync_cluster() { return intrinsic(Intrinsic::sync_cluster, {}); }
ExprP fence() { return intrinsic(Intrinsic::fence, {}); }
ExprP atomic_add(ExprP address, ExprP value) {
  return intrinsic(Intrinsic::atomic_add, {std::move(address), std::move(value)});
}
ExprP warp_reduce(ExprP value, ExprP op, int64_t lanes_apart, int64_t group) {
  return intrinsic(Intrinsic::warp_reduce, {std::move(value), std::move(op)}, {lanes_apart, group});
}
ExprP block_reduce(ExprP value, ExprP op, int64_t block) {
  return intrinsic(Intrinsic::block_reduce, {std::move(value), std::move(op)}, {block});
}
ExprP load_vec(ExprP dst, ExprP src) {
  return intrinsic(Intrinsic::load_vec, {std::move(dst), std::move(src)});
}
ExprP store_vec(ExprP dst, ExprP src) {
  return intrinsic(Intrinsic::store_vec, {std::move(dst), std::move(src)});
}

ExprP braces(std::vector<ExprP> elements, int wrap) {
  auto e = std::make_shared<Expr>();
  e->kind = ExprKind::braces;
  e->args = std::move(elements);
  e->wrap = wrap;
  return e;
}

ExprP member(ExprP object, std::string field) {
  return make(ExprKind::member, std::move(field), {std::move(object)});
}
ExprP add(ExprP a, ExprP b) { return infix(std::move(a), "+", std::move(b)); }
ExprP mul(ExprP a, ExprP b) { return infix(std::move(a), "*", std::move(b)); }
ExprP lt(ExprP a, ExprP b) { return infix(std::move(a), "<", std::move(b)); }

// ---- Block ----

ExprP Block::let(std::string type, std::string name, ExprP value, std::string comment) {
  return let(variable(std::move(type), std::move(name)), std::move(value), std::move(comment));
}

ExprP Block::let(VarP v, ExprP value, std::string comment) {
  Stmt s = stmt(StmtKind::let);
  s.var = std::move(v);
  s.is_const = true;
  s.value = std::move(value);
  s.text = std::move(comment);
  stmts.push_back(std::move(s));
  return var(stmts.back().var);
}

ExprP Block::let_mut(std::string type, std::string name, ExprP value) {
  return let_mut(variable(std::move(type), std::move(name)), std::move(value));
}

ExprP Block::let_mut(VarP v, ExprP value) {
  Stmt s = stmt(StmtKind::let);
  s.var = std::move(v);
  s.value = std::move(value);
  stmts.push_back(std::move(s));
  return var(stmts.back().var);
}

ExprP Block::let_if_read(std::string type, std::string name, ExprP value, std::string comment) {
  return let_if_read(variable(std::move(type), std::move(name)), std::move(value),
                     std::move(comment));
}

ExprP Block::let_if_read(VarP v, ExprP value, std::string comment) {
  ExprP read = let(std::move(v), std::move(value), std::move(comment));
  stmts.back().if_read = true;
  return read;
}

ExprP Block::array(std::string type, std::string name, int64_t length) {
  return array(std::move(type), std::move(name), std::vector<int64_t>{length});
}

ExprP Block::array(std::string type, std::string name, std::vector<int64_t> dims) {
  return array(variable(std::move(type), std::move(name)), std::move(dims));
}

ExprP Block::array(VarP v, std::vector<int64_t> dims) {
  Stmt s = stmt(StmtKind::array);
  s.var = std::move(v);
  s.dims = std::move(dims);
  stmts.push_back(std::move(s));
  return var(stmts.back().var);
}

void Block::assign(ExprP target, ExprP value, std::string op) {
  Stmt s = stmt(StmtKind::assign);
  s.target = std::move(target);
  s.value = std::move(value);
  s.op = std::move(op);
  stmts.push_back(std::move(s));
}

void Block::eval(ExprP value, std::string comment) {
  Stmt s = stmt(StmtKind::eval);
  s.value = std::move(value);
  s.text = std::move(comment);
  stmts.push_back(std::move(s));
}

Loop Block::loop(std::string type, std::string name, ExprP init, ExprP bound, ExprP step,
                 int unroll) {
  return add_loop(variable(std::move(type), std::move(name)), std::move(init), std::move(bound),
                  std::move(step), unroll, false);
}

Loop Block::loop(VarP v, ExprP init, ExprP bound, ExprP step, int unroll) {
  return add_loop(std::move(v), std::move(init), std::move(bound), std::move(step), unroll, false);
}

Loop Block::add_loop(VarP v, ExprP init, ExprP bound, ExprP step, int unroll, bool inline_body) {
  Stmt s = stmt(StmtKind::loop);
  s.var = std::move(v);
  s.init = std::move(init);
  s.bound = std::move(bound);
  s.step = std::move(step);
  s.unroll = unroll;
  s.inline_body = inline_body;
  s.body = std::make_shared<Block>();
  stmts.push_back(std::move(s));
  return Loop{*stmts.back().body, var(stmts.back().var)};
}

Block& Block::branch(ExprP cond) {
  Stmt s = stmt(StmtKind::branch);
  s.value = std::move(cond);
  s.body = std::make_shared<Block>();
  stmts.push_back(std::move(s));
  return *stmts.back().body;
}

void Block::blank() { stmts.push_back(stmt(StmtKind::blank)); }

void Block::jump(std::string what) {
  Stmt s = stmt(StmtKind::jump);
  s.text = std::move(what);
  stmts.push_back(std::move(s));
}

std::vector<ExprP> Block::declare(std::string type, std::vector<Declarator> vars,
                                  std::string comment) {
  Stmt s = stmt(StmtKind::declare);
  s.type = std::move(type);
  s.declarators = std::move(vars);
  s.text = std::move(comment);
  std::vector<ExprP> out;
  for (Declarator& d : s.declarators) {
    if (!d.var) d.var = variable(s.type, d.name);
    out.push_back(var(d.var));
  }
  stmts.push_back(std::move(s));
  return out;
}

void Block::pragma(std::string text) {
  Stmt s = stmt(StmtKind::pragma);
  s.text = std::move(text);
  stmts.push_back(std::move(s));
}

Loop Block::loop_line(std::string type, std::string name, ExprP init, ExprP bound, ExprP step,
                      int unroll) {
  return add_loop(variable(std::move(type), std::move(name)), std::move(init), std::move(bound),
                  std::move(step), unroll, true);
}

Block& Block::branch_line(ExprP cond) {
  Block& body = branch(std::move(cond));
  stmts.back().inline_body = true;
  return body;
}

void Block::splice(const Block& other) {
  stmts.insert(stmts.end(), other.stmts.begin(), other.stmts.end());
}

ExprP Function::param(std::string type, std::string name, bool is_const, std::string comment,
                      bool pointer) {
  params.push_back(
      Param{variable(std::move(type), std::move(name)), is_const, std::move(comment), pointer});
  return var(params.back().var);
}

// ---- uses ----

bool uses(const ExprP& e, const VarP& v) {
  if (!e) return false;
  switch (e->kind) {
    case ExprKind::var:
      return e->var == v;
    case ExprKind::lit:
    case ExprKind::extent:
      return false;
    case ExprKind::offset: {
      const std::vector<VarP> read = variables(e->at, e->lane0);
      return std::find(read.begin(), read.end(), v) != read.end();
    }
    default:
      for (const ExprP& a : e->args) {
        if (uses(a, v)) return true;
      }
      return false;
  }
}

bool uses(const Stmt& s, const VarP& v) {
  for (const ExprP* e : {&s.value, &s.target, &s.init, &s.bound, &s.step}) {
    if (uses(*e, v)) return true;
  }
  for (const Declarator& d : s.declarators) {
    for (const ExprP& n : d.dims) {
      if (uses(n, v)) return true;
    }
    if (uses(d.value, v)) return true;
  }
  return s.body && uses(*s.body, v);
}

bool uses(const Block& b, const VarP& v) {
  for (const Stmt& s : b.stmts) {
    if (uses(s, v)) return true;
  }
  return false;
}

namespace {

// One sweep of place_declarations over `b`; true when it removed a declaration.
bool drop_unread(Block& b) {
  bool removed = false;
  for (size_t i = 0; i < b.stmts.size();) {
    Stmt& s = b.stmts[i];
    if (s.body && drop_unread(*s.body)) removed = true;
    const auto read_later = [&] {
      return std::any_of(b.stmts.begin() + static_cast<std::ptrdiff_t>(i) + 1, b.stmts.end(),
                         [&](const Stmt& t) { return uses(t, s.var); });
    };
    if (s.kind == StmtKind::let && s.if_read && !read_later()) {
      b.stmts.erase(b.stmts.begin() + static_cast<std::ptrdiff_t>(i));
      removed = true;
    } else {
      ++i;
    }
  }
  return removed;
}

}  // namespace

void place_declarations(Function& f) {
  while (drop_unread(f.head) || drop_unread(f.body)) {
  }
}

// ---- scopes: verify ----

namespace {

template <class B, class Visit>
void walk_block(B& b, std::vector<VarP>& declared, const Visit& visit);

// A statement's expressions, each visited with `declared`, holding the variables in scope there:
// a declaration's own variable only after its value, a loop's from its bound on, a declarator's
// from the next declarator on.
template <class S, class Visit>
void walk_stmt(S& s, std::vector<VarP>& declared, const Visit& visit) {
  switch (s.kind) {
    case StmtKind::let:
    case StmtKind::array:
      visit(s.value, declared);
      declared.push_back(s.var);
      return;
    case StmtKind::declare:
      for (auto& d : s.declarators) {
        for (auto& n : d.dims) visit(n, declared);
        visit(d.value, declared);
        declared.push_back(d.var);
      }
      return;
    case StmtKind::loop: {
      visit(s.init, declared);
      const size_t mark = declared.size();
      declared.push_back(s.var);
      visit(s.bound, declared);
      visit(s.step, declared);
      walk_block(*s.body, declared, visit);
      declared.resize(mark);
      return;
    }
    case StmtKind::branch:
      visit(s.value, declared);
      walk_block(*s.body, declared, visit);
      return;
    default:
      visit(s.target, declared);
      visit(s.value, declared);
      return;
  }
}

// A block's declarations end with it.
template <class B, class Visit>
void walk_block(B& b, std::vector<VarP>& declared, const Visit& visit) {
  const size_t mark = declared.size();
  for (auto& s : b.stmts) walk_stmt(s, declared, visit);
  declared.resize(mark);
}

// The whole function in scope order: the parameters, then the head (module scope, whose
// declarations the body sees), then the body.
template <class F, class Visit>
void walk_function(F& f, const Visit& visit) {
  std::vector<VarP> declared;
  for (const Param& p : f.params) declared.push_back(p.var);
  for (auto& s : f.head.stmts) walk_stmt(s, declared, visit);
  walk_block(f.body, declared, visit);
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Identifiers spelled in a function's or type's text (its template arguments included).
std::set<std::string> identifiers(std::string_view text) {
  std::set<std::string> out;
  for (size_t i = 0; i < text.size();) {
    if (is_ident(text[i]) && !std::isdigit(static_cast<unsigned char>(text[i]))) {
      size_t j = i;
      while (j < text.size() && is_ident(text[j])) ++j;
      if (i == 0 || text[i - 1] != '.') out.emplace(text.substr(i, j - i));  // not a member
      i = j;
    } else {
      // Skip numbers whole (0x1p+0f is one literal, not the identifier p).
      if (std::isdigit(static_cast<unsigned char>(text[i]))) {
        while (i < text.size() && (is_ident(text[i]) || text[i] == '.' ||
                                   ((text[i] == '+' || text[i] == '-') && i > 0 &&
                                    (text[i - 1] == 'p' || text[i - 1] == 'P')))) {
          ++i;
        }
      } else {
        ++i;
      }
    }
  }
  return out;
}

class Verifier {
 public:
  explicit Verifier(const Function& f) : f_(f) {
    for (const Param& p : f.params) names_.insert(p.var->name);
    collect_names(f.head);
    collect_names(f.body);
  }

  void function() {
    walk_function(f_,
                  [&](const ExprP& e, const std::vector<VarP>& declared) { expr(e, declared); });
  }

 private:
  // Every name a statement declares: function or type text must not spell one of them.
  void collect_names(const Block& b) {
    for (const Stmt& s : b.stmts) {
      if (s.var) names_.insert(s.var->name);
      for (const Declarator& d : s.declarators) names_.insert(d.var->name);
      if (s.body) collect_names(*s.body);
    }
  }

  void expr(const ExprP& e, const std::vector<VarP>& declared) {
    if (!e) return;
    switch (e->kind) {
      case ExprKind::var:
        need(e->var, declared);
        return;
      case ExprKind::offset:
        for (const VarP& v : variables(e->at, e->lane0)) need(v, declared);
        return;
      case ExprKind::call:
      case ExprKind::cast:
        // A function's or type's name, possibly with template arguments: none may name a
        // variable, or the passes would not see the read.
        for (const std::string& id : identifiers(e->text)) {
          if (names_.count(id) != 0) {
            throw InternalError(fmt::format(
                "kernel IR of {}: the text `{}` spells the variable {} (use a var node)", f_.name,
                e->text, id));
          }
        }
        break;
      default:
        break;
    }
    for (const ExprP& a : e->args) expr(a, declared);
  }

  void need(const VarP& v, const std::vector<VarP>& declared) const {
    if (std::find(declared.begin(), declared.end(), v) != declared.end()) return;
    throw InternalError(
        fmt::format("kernel IR of {}: {} is read where it is not declared", f_.name, v->name));
  }

  const Function& f_;
  std::set<std::string> names_;
};

}  // namespace

void verify(const Function& f) {
  Verifier v(f);
  v.function();
}

// ---- lowering ----

namespace {

// Rewrites offsets and extents into plain arithmetic, numbering runtime extents as it meets
// them: statements in order, a statement's expressions in the order they are printed but for
// a loop's (init, bound, step), each expression's operands left to right.
class IndexLowering {
 public:
  explicit IndexLowering(RuntimeExtents* runtime) : runtime_(runtime) {}

  void block(Block& b) {
    for (Stmt& s : b.stmts) {
      for (ExprP* e : {&s.target, &s.value, &s.init, &s.bound, &s.step}) *e = expr(*e);
      if (s.body) block(*s.body);
    }
  }

 private:
  ExprP expr(const ExprP& e) {
    if (!e) return e;
    switch (e->kind) {
      case ExprKind::offset:
        return offset_expr(e->at, e->lane0, runtime_);
      case ExprKind::extent: {
        if (runtime_ == nullptr || !runtime_->runtime(e->number)) return lit(e->number);
        const int k = runtime_->argument(e->number);  // (registers it, with its variables)
        return var(runtime_->extent_vars[k]);
      }
      default:
        break;
    }
    std::vector<ExprP> args;
    bool changed = false;
    for (const ExprP& a : e->args) {
      args.push_back(expr(a));
      changed = changed || args.back() != a;
    }
    if (!changed) return e;
    auto copy = std::make_shared<Expr>(*e);
    copy->args = std::move(args);
    return copy;
  }

  RuntimeExtents* runtime_;
};

}  // namespace

void lower_indices(Function& f, RuntimeExtents* runtime) {
  IndexLowering lowering(runtime);
  lowering.block(f.head);
  lowering.block(f.body);
}

// ---- dynamic kernels: sizes are parameters ----

namespace {

using IsSize = std::function<bool(int64_t)>;

// (Zero is no size: an empty extent never reaches a kernel.)
bool any_size(const std::vector<int64_t>& numbers, const IsSize& is_size) {
  return std::any_of(numbers.begin(), numbers.end(),
                     [&](int64_t n) { return n != 0 && is_size(n); });
}

// The first integer constant of `e` (its operands included) that is a size.
std::optional<int64_t> size_constant(const ExprP& e, const IsSize& is_size) {
  if (!e) return std::nullopt;
  if (e->kind == ExprKind::lit && e->number != 0 && is_size(e->number)) return e->number;
  if (e->kind == ExprKind::intrinsic) {
    for (int64_t n : e->numbers) {
      if (n != 0 && is_size(n)) return n;
    }
  }
  for (const ExprP& a : e->args) {
    if (auto n = size_constant(a, is_size)) return n;
  }
  return std::nullopt;
}

std::string constant_in(int64_t n, std::string_view where) {
  return fmt::format("the constant {} in `{}`", n, where);
}

std::optional<std::string> size_constant(const Block& b, const IsSize& is_size) {
  for (const Stmt& s : b.stmts) {
    for (const ExprP* e : {&s.target, &s.value, &s.init, &s.bound, &s.step}) {
      if (auto n = size_constant(*e, is_size)) return constant_in(*n, print(*e));
    }
    for (const Declarator& d : s.declarators) {
      for (const ExprP& e : d.dims) {
        if (auto n = size_constant(e, is_size)) return constant_in(*n, d.name + "[]");
      }
      if (auto n = size_constant(d.value, is_size)) return constant_in(*n, d.name);
    }
    if (any_size(s.dims, is_size)) return fmt::format("an array length of {}", s.var->name);
    if (s.unroll > 1 && is_size(s.unroll)) return fmt::format("the unroll count {}", s.unroll);
    if (s.body) {
      if (auto where = size_constant(*s.body, is_size)) return where;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> symbolic_constant(const Function& f, const IsSize& is_size) {
  if (auto where = size_constant(f.head, is_size)) return where;
  return size_constant(f.body, is_size);
}

// ---- dumping ----

namespace {

std::string_view builtin_name(const Expr& e) {
  switch (static_cast<Builtin>(e.number)) {
    case Builtin::thread_index:
      return "threadIdx.x";
    case Builtin::block_index:
      return "blockIdx.x";
    case Builtin::grid_blocks:
      return "gridDim.x";
    case Builtin::block_threads:
      return "blockDim.x";
  }
  throw InternalError("kernel IR: unknown built-in");
}

// The device function an intrinsic calls, with its compile-time parameters.
std::string intrinsic_function(const Expr& e) {
  switch (static_cast<Intrinsic>(e.number)) {
    case Intrinsic::sync_block:
      return "__syncthreads";
    case Intrinsic::sync_cluster:
      return "fj_cluster_sync";
    case Intrinsic::fence:
      return "__threadfence";
    case Intrinsic::atomic_add:
      return "atomicAdd";
    case Intrinsic::warp_reduce:
      return fmt::format("fj_warp_reduce<{}>", fmt::join(e.numbers, ", "));
    case Intrinsic::block_reduce:
      return fmt::format("fj_block_reduce<{}>", fmt::join(e.numbers, ", "));
    case Intrinsic::load_vec:
      return "fj_load_vec";
    case Intrinsic::store_vec:
      return "fj_store_vec";
  }
  throw InternalError("kernel IR: unknown intrinsic");
}

}  // namespace

namespace {

std::string dump(const ExprP& e) {
  if (!e) return "null";
  const auto args = [&](size_t from) {
    std::string s;
    for (size_t i = from; i < e->args.size(); ++i) s += " " + dump(e->args[i]);
    return s;
  };
  switch (e->kind) {
    case ExprKind::var:
      return e->var->name;
    case ExprKind::lit:
      return e->text;
    case ExprKind::call:
      return fmt::format("(call {}{})", e->text, args(0));
    case ExprKind::infix:
      return fmt::format("({}{})", e->text, args(0));
    case ExprKind::prefix:
      return fmt::format("(prefix{}{})", e->text, args(0));
    case ExprKind::select:
      return fmt::format("(?{})", args(0));
    case ExprKind::group:
      return fmt::format("(group{})", args(0));
    case ExprKind::subscript:
      return fmt::format("([]{})", args(0));
    case ExprKind::cast:
      return fmt::format("(cast {}{})", e->text, args(0));
    case ExprKind::offset:
      return fmt::format("(offset{} {})", e->lane0 ? "@lane0" : "",
                         templates::offset(e->at, e->lane0));
    case ExprKind::extent:
      return fmt::format("(extent {})", e->number);
    case ExprKind::member:
      return fmt::format("(.{} {})", args(0), e->text);
    case ExprKind::builtin:
      return std::string(builtin_name(*e));
    case ExprKind::intrinsic:
      return fmt::format("({}{})", intrinsic_function(*e), args(0));
    case ExprKind::braces:
      return fmt::format("({{}}{})", args(0));
  }
  throw InternalError("kernel IR: unknown expression kind");
}

void dump(const Block& b, int level, std::string& out) {
  const auto line = [&](const std::string& text) {
    out.append(static_cast<size_t>(2 * level), ' ').append(text).push_back('\n');
  };
  const auto note = [](const std::string& c) { return c.empty() ? c : "  # " + c; };
  for (const Stmt& s : b.stmts) {
    switch (s.kind) {
      case StmtKind::let:
        line(fmt::format("let {}{} {}{}{}", s.is_const ? "const " : "", s.var->type, s.var->name,
                         s.value ? " = " + dump(s.value) : "", note(s.text)));
        break;
      case StmtKind::array:
        line(fmt::format("array {} {}[{}]", s.var->type, s.var->name, fmt::join(s.dims, "][")));
        break;
      case StmtKind::assign:
        line(fmt::format("assign {} {} {}", dump(s.target), s.op, dump(s.value)));
        break;
      case StmtKind::eval:
        line(fmt::format("eval {}{}", dump(s.value), note(s.text)));
        break;
      case StmtKind::loop:
        line(fmt::format("loop {} {} from {} below {} step {}{}", s.var->type, s.var->name,
                         dump(s.init), dump(s.bound), s.step ? dump(s.step) : "1",
                         s.unroll > 0 ? fmt::format(" unroll {}", s.unroll) : ""));
        dump(*s.body, level + 1, out);
        break;
      case StmtKind::branch:
        line("if " + dump(s.value));
        dump(*s.body, level + 1, out);
        break;
      case StmtKind::jump:
        line(s.text);
        break;
      case StmtKind::comment:
        line("# " + s.text);
        break;
      case StmtKind::declare:
        for (const Declarator& d : s.declarators) {
          std::string dims;
          for (const ExprP& n : d.dims) dims += "[" + (n ? dump(n) : "") + "]";
          line(fmt::format("declare {} {}{}{}", s.type, d.var->name, dims,
                           d.value ? " = " + dump(d.value) : ""));
        }
        break;
      case StmtKind::pragma:
        line("#pragma " + s.text);
        break;
      case StmtKind::blank:
        break;
    }
  }
}

}  // namespace

std::string dump(const Function& f) {
  std::string out = fmt::format("kernel {} block {} min_blocks {} cluster {}\n", f.name, f.block,
                                f.min_blocks, f.cluster);
  for (const Param& p : f.params) {
    out += fmt::format("param {}{}{} {}\n", p.is_const && p.pointer ? "const " : "", p.var->type,
                       p.pointer ? "*" : "", p.var->name);
  }
  out += "head\n";
  dump(f.head, 1, out);
  out += "body\n";
  dump(f.body, 1, out);
  return out;
}

// ---- printing ----

namespace {

std::string print_call(const std::string& fn, const std::vector<ExprP>& args) {
  std::string s = fn + "(";
  for (size_t i = 0; i < args.size(); ++i) {
    if (i) s += ", ";
    s += print(args[i]);
  }
  return s + ")";
}

}  // namespace

std::string print(const ExprP& e) {
  if (!e) throw InternalError("kernel IR: printing an empty expression");
  switch (e->kind) {
    case ExprKind::var:
      return e->var->name;
    case ExprKind::lit:
      return e->text;
    case ExprKind::call:
      return print_call(e->text, e->args);
    case ExprKind::builtin:
      return std::string(builtin_name(*e));
    case ExprKind::intrinsic:
      return print_call(intrinsic_function(*e), e->args);
    case ExprKind::infix:
      return fmt::format("{} {} {}", print(e->args[0]), e->text, print(e->args[1]));
    case ExprKind::prefix:
      return e->text + print(e->args[0]);
    case ExprKind::select:
      return fmt::format("{} ? {} : {}", print(e->args[0]), print(e->args[1]), print(e->args[2]));
    case ExprKind::group:
      return fmt::format("({})", print(e->args[0]));
    case ExprKind::subscript:
      return fmt::format("{}[{}]", print(e->args[0]), print(e->args[1]));
    case ExprKind::cast:
      return fmt::format("({}){}", e->text, print(e->args[0]));
    case ExprKind::offset:
    case ExprKind::extent:
      throw InternalError(
          "kernel IR: an offset or extent is printed before lower_indices has lowered it");
    case ExprKind::member:
      return fmt::format("{}.{}", print(e->args[0]), e->text);
    case ExprKind::braces: {
      // A wrapped list's next lines start one column past the brace; the declaration that
      // prints it moves them to the brace's column (Printer::declaration).
      std::string s = "{";
      for (size_t i = 0; i < e->args.size(); ++i) {
        if (i) s += e->wrap > 0 && i % e->wrap == 0 ? ",\n " : ", ";
        s += print(e->args[i]);
      }
      return s + "}";
    }
  }
  throw InternalError("kernel IR: unknown expression kind");
}

namespace {

class Printer {
 public:
  void block(const Block& b, int level) {
    for (const Stmt& s : b.stmts) stmt(s, level);
  }
  void line(int level, const std::string& text) {
    if (!text.empty()) out_.append(static_cast<size_t>(2 * level), ' ').append(text);
    out_.push_back('\n');
  }
  std::string take() { return std::move(out_); }

 private:
  static std::string trailing(const std::string& comment) {
    return comment.empty() ? std::string() : "  // " + comment;
  }

  // `type a = x, b[n] = {..};` at `level`: a value's continuation lines (a wrapped list) move to
  // the value's column.
  std::string declaration(const Stmt& s, int level) {
    std::string t = s.type;
    for (size_t i = 0; i < s.declarators.size(); ++i) {
      const Declarator& d = s.declarators[i];
      t += fmt::format("{}{}", i ? ", " : " ", d.var->name);
      for (const ExprP& n : d.dims) t += n ? fmt::format("[{}]", print(n)) : "[]";
      if (!d.value) continue;
      t += " = ";
      const std::string indent(static_cast<size_t>(2 * level) + t.size(), ' ');
      for (char c : print(d.value)) {
        t.push_back(c);
        if (c == '\n') t += indent;
      }
    }
    return t + ";" + trailing(s.text);
  }

  // The one statement of an inline body, without its line break.
  std::string inline_body(const Block& b) {
    Printer p;
    p.block(b, 0);
    std::string text = p.take();
    if (b.stmts.size() != 1 || std::count(text.begin(), text.end(), '\n') != 1) {
      throw InternalError(
          "kernel IR: an inline loop or branch body is one statement of one line:\n" + text);
    }
    text.pop_back();
    return text;
  }

  void stmt(const Stmt& s, int level) {
    switch (s.kind) {
      case StmtKind::let: {
        std::string t = (s.is_const ? "const " : "") + s.var->type + " " + s.var->name;
        if (s.value) t += " = " + print(s.value);
        line(level, t + ";" + trailing(s.text));
        return;
      }
      case StmtKind::array:
        line(level, fmt::format("{} {}[{}];", s.var->type, s.var->name, fmt::join(s.dims, "][")));
        return;
      case StmtKind::assign:
        line(level, fmt::format("{} {} {};", print(s.target), s.op, print(s.value)));
        return;
      case StmtKind::eval:
        line(level, print(s.value) + ";" + trailing(s.text));
        return;
      case StmtKind::loop: {
        if (s.unroll == 1) line(level, "#pragma unroll");
        if (s.unroll > 1) line(level, fmt::format("#pragma unroll {}", s.unroll));
        const std::string& name = s.var->name;
        const std::string step =
            s.step ? fmt::format("{} += {}", name, print(s.step)) : "++" + name;
        const std::string head = fmt::format("for ({} {} = {}; {} < {}; {})", s.var->type, name,
                                             print(s.init), name, print(s.bound), step);
        if (s.inline_body) {
          line(level, head + " " + inline_body(*s.body));
          return;
        }
        line(level, head + " {");
        block(*s.body, level + 1);
        line(level, "}");
        return;
      }
      case StmtKind::branch:
        if (s.inline_body) {
          line(level, fmt::format("if ({}) {}", print(s.value), inline_body(*s.body)));
          return;
        }
        line(level, fmt::format("if ({}) {{", print(s.value)));
        block(*s.body, level + 1);
        line(level, "}");
        return;
      case StmtKind::jump:
        line(level, s.text + ";");
        return;
      case StmtKind::comment:
        line(level, "// " + s.text);
        return;
      case StmtKind::blank:
        line(0, "");
        return;
      case StmtKind::declare:
        line(level, declaration(s, level));
        return;
      case StmtKind::pragma:
        line(0, "#pragma " + s.text);
        return;
    }
  }

  std::string out_;
};

}  // namespace

std::string print(const Function& f) {
  Printer p;
  p.block(f.head, 0);
  std::string bounds =
      f.min_blocks > 0 ? fmt::format("{}, {}", f.block, f.min_blocks) : fmt::format("{}", f.block);
  if (f.min_blocks > 0 && !f.relaxed_min_blocks.empty()) {
    p.line(0, "#ifndef FJ_MIN_BLOCKS");
    p.line(0, fmt::format("#define FJ_MIN_BLOCKS {}", f.min_blocks));
    p.line(0, "#endif");
    bounds = fmt::format("{}, FJ_MIN_BLOCKS", f.block);
  }
  const std::string cluster =
      f.cluster > 1 ? fmt::format("__cluster_dims__({}, 1, 1) ", f.cluster) : std::string();
  const auto declaration = [](const Param& q) {
    return q.pointer ? fmt::format("{}{}* __restrict__ {}", q.is_const ? "const " : "", q.var->type,
                                   q.var->name)
                     : fmt::format("{} {}", q.var->type, q.var->name);
  };
  const std::string signature = fmt::format(
      "extern \"C\" __global__ void {}__launch_bounds__({}) {}(", cluster, bounds, f.name);
  if (f.params_inline) {
    std::vector<std::string> params;
    for (const Param& q : f.params) {
      if (!q.comment.empty()) {
        throw InternalError(fmt::format(
            "kernel IR of {}: parameter {} has a comment, which an inline signature cannot print",
            f.name, q.var->name));
      }
      params.push_back(declaration(q));
    }
    p.line(0, fmt::format("{}{}) {{", signature, fmt::join(params, ", ")));
  } else {
    p.line(0, signature);
    for (size_t i = 0; i < f.params.size(); ++i) {
      const Param& q = f.params[i];
      const std::string sep = i + 1 < f.params.size() ? "," : ") {";
      p.line(0, fmt::format("    {}{}{}", declaration(q), sep,
                            q.comment.empty() ? "" : "  // " + q.comment));
    }
    if (f.params.empty()) p.line(0, "    ) {");
  }
  p.block(f.body, 1);
  p.line(0, "}");
  return p.take();
}

}  // namespace fusejit::templates::kir
