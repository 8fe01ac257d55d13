// ir/text: the trace text format (docs/trace-format.md is its grammar). print() and parse()
// round-trip exactly: print(parse(print(g))) == print(g).
#pragma once

#include <string>
#include <string_view>

#include "ir/graph.h"
#include "ir/symbolic.h"

namespace fusejit::ir {

// Version 1: static shapes. Version 2 adds dynamic dims (a `dynamic B=8, S=128` line after the
// header, dims such as B or 4*B*S); a trace without them still prints as version 1.
inline constexpr int kTraceFormatVersion = 2;

std::string print(const Graph& g);
std::string print(const SymbolicGraph& sym);
// One node as a line of the trace (without the newline): "%4 : f32[64,256] = add %3, %2".
std::string node_line(const Graph& g, NodeId id);

// Parses a trace; throws fusejit::Error whose message starts with "<source>:<line>:<column>: "
// when the text is malformed or a node is ill-formed.
// A trace with dynamic dims parses to its instantiation at their example values (a concrete
// trace); parse_symbolic keeps the symbols.
Graph parse(std::string_view text, std::string_view source = "<trace>");
SymbolicGraph parse_symbolic(std::string_view text, std::string_view source = "<trace>");

// Reads and parses a trace file; throws fusejit::Error naming the path when it cannot be read.
Graph parse_file(const std::string& path);
SymbolicGraph parse_symbolic_file(const std::string& path);
// The largest trace file read_trace_file accepts.
inline constexpr size_t kMaxTraceBytes = size_t{256} << 20;
// The bytes of a trace file; throws fusejit::Error naming the path when it cannot be read, is
// larger than kMaxTraceBytes or holds a NUL byte (it is not text).
std::string read_trace_file(const std::string& path);

}  // namespace fusejit::ir
