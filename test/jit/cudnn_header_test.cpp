// jit/libs/cudnn_api.h declares cuDNN's enum values itself, so that fusejit builds and runs without
// cuDNN's headers. This test, built only where CMake finds the real cudnn_graph.h, checks each
// declared value against the header's enumerator at compile time.
#include <cudnn_graph.h>

#include "jit/libs/cudnn_api.h"
#include "support/catch.h"

namespace cudnn = fusejit::jit::cudnn;

#define FUSEJIT_SAME(ours, theirs) \
  static_assert(static_cast<int>(cudnn::ours) == static_cast<int>(theirs), #ours " != " #theirs)

FUSEJIT_SAME(StatusCode::success, CUDNN_STATUS_SUCCESS);
FUSEJIT_SAME(StatusCode::not_initialized, CUDNN_STATUS_NOT_INITIALIZED);
FUSEJIT_SAME(StatusCode::bad_param, CUDNN_STATUS_BAD_PARAM);
FUSEJIT_SAME(StatusCode::not_supported, CUDNN_STATUS_NOT_SUPPORTED);
FUSEJIT_SAME(StatusCode::internal_error, CUDNN_STATUS_INTERNAL_ERROR);
FUSEJIT_SAME(StatusCode::execution_failed, CUDNN_STATUS_EXECUTION_FAILED);

FUSEJIT_SAME(DescriptorType::pointwise, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::engine_config, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::engine_heuristics, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::execution_plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::operation_pointwise, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::operation_graph, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::variant_pack, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::tensor, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::matmul, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::operation_matmul, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::device_properties, CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::reduction, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
FUSEJIT_SAME(DescriptorType::operation_reduction, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);

FUSEJIT_SAME(AttributeType::handle, CUDNN_TYPE_HANDLE);
FUSEJIT_SAME(AttributeType::data_type, CUDNN_TYPE_DATA_TYPE);
FUSEJIT_SAME(AttributeType::boolean, CUDNN_TYPE_BOOLEAN);
FUSEJIT_SAME(AttributeType::int64, CUDNN_TYPE_INT64);
FUSEJIT_SAME(AttributeType::float32, CUDNN_TYPE_FLOAT);
FUSEJIT_SAME(AttributeType::void_ptr, CUDNN_TYPE_VOID_PTR);
FUSEJIT_SAME(AttributeType::heur_mode, CUDNN_TYPE_HEUR_MODE);
FUSEJIT_SAME(AttributeType::pointwise_mode, CUDNN_TYPE_POINTWISE_MODE);
FUSEJIT_SAME(AttributeType::descriptor, CUDNN_TYPE_BACKEND_DESCRIPTOR);
FUSEJIT_SAME(AttributeType::reduction_operator, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE);

FUSEJIT_SAME(Attribute::pointwise_mode, CUDNN_ATTR_POINTWISE_MODE);
FUSEJIT_SAME(Attribute::pointwise_math_precision, CUDNN_ATTR_POINTWISE_MATH_PREC);
FUSEJIT_SAME(Attribute::pointwise_axis, CUDNN_ATTR_POINTWISE_AXIS);
FUSEJIT_SAME(Attribute::engine_heuristics_mode, CUDNN_ATTR_ENGINEHEUR_MODE);
FUSEJIT_SAME(Attribute::engine_heuristics_operation_graph, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
FUSEJIT_SAME(Attribute::engine_heuristics_results, CUDNN_ATTR_ENGINEHEUR_RESULTS);
FUSEJIT_SAME(Attribute::engine_heuristics_device_properties, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP);
FUSEJIT_SAME(Attribute::execution_plan_handle, CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
FUSEJIT_SAME(Attribute::execution_plan_engine_config, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
FUSEJIT_SAME(Attribute::execution_plan_workspace_size, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE);
FUSEJIT_SAME(Attribute::operation_pointwise_descriptor,
             CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
FUSEJIT_SAME(Attribute::operation_pointwise_x, CUDNN_ATTR_OPERATION_POINTWISE_XDESC);
FUSEJIT_SAME(Attribute::operation_pointwise_b, CUDNN_ATTR_OPERATION_POINTWISE_BDESC);
FUSEJIT_SAME(Attribute::operation_pointwise_y, CUDNN_ATTR_OPERATION_POINTWISE_YDESC);
FUSEJIT_SAME(Attribute::operation_pointwise_t, CUDNN_ATTR_OPERATION_POINTWISE_TDESC);
FUSEJIT_SAME(Attribute::operation_graph_handle, CUDNN_ATTR_OPERATIONGRAPH_HANDLE);
FUSEJIT_SAME(Attribute::operation_graph_ops, CUDNN_ATTR_OPERATIONGRAPH_OPS);
FUSEJIT_SAME(Attribute::tensor_byte_alignment, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT);
FUSEJIT_SAME(Attribute::tensor_data_type, CUDNN_ATTR_TENSOR_DATA_TYPE);
FUSEJIT_SAME(Attribute::tensor_dimensions, CUDNN_ATTR_TENSOR_DIMENSIONS);
FUSEJIT_SAME(Attribute::tensor_strides, CUDNN_ATTR_TENSOR_STRIDES);
FUSEJIT_SAME(Attribute::tensor_unique_id, CUDNN_ATTR_TENSOR_UNIQUE_ID);
FUSEJIT_SAME(Attribute::tensor_is_virtual, CUDNN_ATTR_TENSOR_IS_VIRTUAL);
FUSEJIT_SAME(Attribute::tensor_is_by_value, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
FUSEJIT_SAME(Attribute::variant_pack_unique_ids, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
FUSEJIT_SAME(Attribute::variant_pack_data_pointers, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
FUSEJIT_SAME(Attribute::variant_pack_workspace, CUDNN_ATTR_VARIANT_PACK_WORKSPACE);
FUSEJIT_SAME(Attribute::matmul_compute_type, CUDNN_ATTR_MATMUL_COMP_TYPE);
FUSEJIT_SAME(Attribute::operation_matmul_a, CUDNN_ATTR_OPERATION_MATMUL_ADESC);
FUSEJIT_SAME(Attribute::operation_matmul_b, CUDNN_ATTR_OPERATION_MATMUL_BDESC);
FUSEJIT_SAME(Attribute::operation_matmul_c, CUDNN_ATTR_OPERATION_MATMUL_CDESC);
FUSEJIT_SAME(Attribute::operation_matmul_descriptor, CUDNN_ATTR_OPERATION_MATMUL_DESC);
FUSEJIT_SAME(Attribute::reduction_operator, CUDNN_ATTR_REDUCTION_OPERATOR);
FUSEJIT_SAME(Attribute::reduction_compute_type, CUDNN_ATTR_REDUCTION_COMP_TYPE);
FUSEJIT_SAME(Attribute::operation_reduction_x, CUDNN_ATTR_OPERATION_REDUCTION_XDESC);
FUSEJIT_SAME(Attribute::operation_reduction_y, CUDNN_ATTR_OPERATION_REDUCTION_YDESC);
FUSEJIT_SAME(Attribute::operation_reduction_descriptor, CUDNN_ATTR_OPERATION_REDUCTION_DESC);
FUSEJIT_SAME(Attribute::device_properties_handle, CUDNN_ATTR_DEVICEPROP_HANDLE);

FUSEJIT_SAME(DataType::float32, CUDNN_DATA_FLOAT);
FUSEJIT_SAME(DataType::float16, CUDNN_DATA_HALF);
FUSEJIT_SAME(DataType::int32, CUDNN_DATA_INT32);
FUSEJIT_SAME(DataType::bfloat16, CUDNN_DATA_BFLOAT16);
FUSEJIT_SAME(DataType::boolean, CUDNN_DATA_BOOLEAN);

FUSEJIT_SAME(PointwiseMode::add, CUDNN_POINTWISE_ADD);
FUSEJIT_SAME(PointwiseMode::mul, CUDNN_POINTWISE_MUL);
FUSEJIT_SAME(PointwiseMode::div, CUDNN_POINTWISE_DIV);
FUSEJIT_SAME(PointwiseMode::sub, CUDNN_POINTWISE_SUB);
FUSEJIT_SAME(PointwiseMode::exp, CUDNN_POINTWISE_EXP);
FUSEJIT_SAME(PointwiseMode::log, CUDNN_POINTWISE_LOG);
FUSEJIT_SAME(PointwiseMode::cmp_ge, CUDNN_POINTWISE_CMP_GE);
FUSEJIT_SAME(PointwiseMode::gen_index, CUDNN_POINTWISE_GEN_INDEX);
FUSEJIT_SAME(PointwiseMode::binary_select, CUDNN_POINTWISE_BINARY_SELECT);

FUSEJIT_SAME(ReductionOperator::add, CUDNN_REDUCE_TENSOR_ADD);
FUSEJIT_SAME(ReductionOperator::max, CUDNN_REDUCE_TENSOR_MAX);

FUSEJIT_SAME(HeurMode::a, CUDNN_HEUR_MODE_A);

// The element types the attribute types stand for, and the entry points' argument types.
static_assert(sizeof(cudnn::Handle) == sizeof(cudnnHandle_t));
static_assert(sizeof(cudnn::Descriptor) == sizeof(cudnnBackendDescriptor_t));
static_assert(sizeof(cudnn::Status) == sizeof(cudnnStatus_t));
static_assert(sizeof(cudnn::DataType) == sizeof(cudnnDataType_t));
static_assert(sizeof(cudnn::PointwiseMode) == sizeof(cudnnPointwiseMode_t));
static_assert(sizeof(cudnn::ReductionOperator) == sizeof(cudnnReduceTensorOp_t));
static_assert(sizeof(cudnn::HeurMode) == sizeof(cudnnBackendHeurMode_t));
static_assert(sizeof(cudnn::Attribute) == sizeof(cudnnBackendAttributeName_t));
static_assert(sizeof(cudnn::AttributeType) == sizeof(cudnnBackendAttributeType_t));
static_assert(sizeof(cudnn::DescriptorType) == sizeof(cudnnBackendDescriptorType_t));

TEST_CASE("cudnn: our enum values are the header's (checked when this compiled)", "[jit][cudnn]") {
  INFO("checked against cuDNN " << CUDNN_MAJOR << "." << CUDNN_MINOR << "." << CUDNN_PATCHLEVEL);
  // The values are cuDNN 9's; a header of another major may renumber them.
  CHECK(CUDNN_MAJOR == 9);
  CHECK(cudnn::refuse_version(CUDNN_VERSION).empty() ==
        (CUDNN_VERSION != 91000 && CUDNN_VERSION != 91001));
}
