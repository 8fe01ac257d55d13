// ir/fmt_impl: fmt's compiled part, built once for the whole project.
//
// Every other file includes fmt's headers without FMT_HEADER_ONLY, so that fmt's formatting
// engine is compiled here alone rather than in each of the project's ~170 translation units
// (about 4 s of compile time apiece at -O3 with g++ 12). The libraries stay self-contained,
// as with header-only use: no shared libfmt is needed where the binaries run, and a consumer
// of the installed package links nothing more (these symbols live in fusejit_ir).
//
// This file is written for fmt 9 (what CMakeLists.txt checks before compiling it): the
// definitions come from fmt's format-inl.h; what follows instantiates the templates that
// fmt's headers declare but do not define when not header-only.
#include <fmt/format.h>

#ifdef FMT_HEADER_ONLY
#error "ir/fmt_impl.cpp is for builds that use fmt compiled, not FMT_HEADER_ONLY"
#endif
#if FMT_VERSION < 90000 || FMT_VERSION >= 100000
#error "ir/fmt_impl.cpp is written for fmt 9; CMakeLists.txt uses fmt header-only otherwise"
#endif

#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {

template auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;

#ifndef FMT_STATIC_THOUSANDS_SEPARATOR
template locale_ref::locale_ref(const std::locale& loc);
template auto locale_ref::get<std::locale>() const -> std::locale;
#endif

template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template auto decimal_point_impl(locale_ref) -> char;
template auto decimal_point_impl(locale_ref) -> wchar_t;

}  // namespace detail
FMT_END_NAMESPACE
