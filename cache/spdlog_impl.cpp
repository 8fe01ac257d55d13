// cache/spdlog_impl: spdlog's compiled part, built once for the whole project.
//
// Every file that logs includes spdlog's headers with SPDLOG_COMPILED_LIB, which leaves the
// bodies of spdlog's classes out of them; they are compiled here alone instead of in each
// translation unit that logs (about 9 s of compile time apiece at -O3 with g++ 12). This is
// the lowest layer that logs (the disk store's warnings), so every binary that logs links
// it; no shared libspdlog is needed where the binaries run.
//
// The definitions come from spdlog's own -inl.h headers; what follows instantiates the
// templates the project uses: the sinks' mutex policies and the colour console sinks (the
// default logger's and jit/log's).
#ifndef SPDLOG_COMPILED_LIB
#error "cache/spdlog_impl.cpp is for builds that use spdlog compiled (SPDLOG_COMPILED_LIB)"
#endif

#include <mutex>

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/console_globals.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/sinks/stdout_color_sinks-inl.h>
#include <spdlog/spdlog-inl.h>

template class spdlog::sinks::base_sink<std::mutex>;
template class spdlog::sinks::base_sink<spdlog::details::null_mutex>;

template class spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_sink<spdlog::details::console_nullmutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_nullmutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_mutex>;
template class spdlog::sinks::ansicolor_stderr_sink<spdlog::details::console_nullmutex>;
