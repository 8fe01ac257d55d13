// What libfusejit.so exports: the public API, nothing else.
//
// The library is compiled with hidden visibility, and each public header wraps its
// declarations in FUSEJIT_PUBLIC_BEGIN ... FUSEJIT_PUBLIC_END, which gives them (and so their
// definitions in the library) default visibility. Everything else, the layers' internals and the
// copies of fmt, spdlog and xxHash compiled into the library, stays inside it: a host program
// that links its own versions of those gets its own, with no clash.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define FUSEJIT_PUBLIC_BEGIN _Pragma("GCC visibility push(default)")
#define FUSEJIT_PUBLIC_END _Pragma("GCC visibility pop")
#else
#define FUSEJIT_PUBLIC_BEGIN
#define FUSEJIT_PUBLIC_END
#endif
