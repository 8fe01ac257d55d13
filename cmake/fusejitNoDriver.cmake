# fusejit reaches the CUDA driver (libcuda.so.1) at run time only, through the runtime's
# cudaGetDriverEntryPointByVersion (jit/runtime/driver.h), so that every binary starts on a machine
# without a GPU driver. FindCUDAToolkit, however, makes CUDA::nvrtc depend on CUDA::cuda_driver
# (the toolkit's stubs/libcuda.so), although libnvrtc.so itself needs no libcuda. A linker run
# with --as-needed (Debian's GCC default) drops the stub again; one without it (any -fsanitize
# build with Debian's GCC, clang, other distributions) would record a NEEDED libcuda.so.1 in
# every binary. So the dependency is cut where it is made, for every toolkit target we link.
# Included by the top-level CMakeLists.txt and by the installed fusejitConfig.cmake.
function(fusejit_cut_cuda_driver)
  foreach(target IN ITEMS CUDA::nvrtc CUDA::cudart CUDA::cublasLt CUDA::cublas)
    if(NOT TARGET ${target})
      continue()
    endif()
    get_target_property(libs ${target} INTERFACE_LINK_LIBRARIES)
    if(NOT libs)
      continue()
    endif()
    list(FILTER libs EXCLUDE REGEX "cuda_driver|/libcuda\\.so")
    set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${libs}")
  endforeach()
endfunction()
