#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/reader.h"
#include "status_error.h"

namespace ntp::python {
namespace py = pybind11;

namespace {

using checkpoint::CheckpointReader;

// Fills `out` (float32, C order, the request's local shape) straight from the checkpoint's
// chunks: no staging copy. The GIL is released while the chunks are read and checked.
void read_into(const CheckpointReader& reader, const std::string& tensor, const std::string& kind,
               std::vector<int64_t> logical_shape, int axis, std::vector<int64_t> index,
               py::array_t<float, py::array::c_style> out) {
  checkpoint::PieceSpec spec;
  spec.tensor = tensor;
  spec.kind = kind;
  spec.logical_shape = std::move(logical_shape);
  spec.axis = axis;
  spec.index = std::move(index);
  float* data = out.mutable_data();
  const auto size = static_cast<std::size_t>(out.size());
  Status status;
  {
    py::gil_scoped_release unlocked;
    status = reader.read(spec, std::span<float>(data, size));
  }
  throw_if_error(status);
}

}  // namespace

void bind_checkpoint(py::module_& m) {
  py::class_<CheckpointReader, std::shared_ptr<CheckpointReader>>(m, "Reader")
      .def_static(
          "open",
          [](const std::string& dir) {
            return std::make_shared<CheckpointReader>(value_or_throw(CheckpointReader::open(dir)));
          },
          py::arg("dir"), "Opens a step or save directory (following `latest`).")
      .def_property_readonly("step_dir",
                             [](const CheckpointReader& r) { return r.step_dir().string(); })
      .def("manifest_json",
           [](const CheckpointReader& r) { return checkpoint::manifest_to_string(r.manifest()); })
      .def("read", &read_into, py::arg("tensor"), py::arg("kind"), py::arg("logical_shape"),
           py::arg("axis"), py::arg("index"), py::arg("out"))
      .def(
          "verify",
          [](const CheckpointReader& r) {
            Status status;
            {
              py::gil_scoped_release unlocked;
              status = r.verify_all();
            }
            throw_if_error(status);
            return r.chunks_verified();
          },
          "Reads every chunk and checks its CRC-32C; returns the chunks checked.");
  m.def(
      "consolidate",
      [](const std::string& dir, const std::string& out, bool force) {
        checkpoint::ConsolidateSummary summary;
        {
          py::gil_scoped_release unlocked;
          summary = value_or_throw(checkpoint::consolidate_to_hf(dir, out, {.force = force}));
        }
        py::dict d;
        d["step"] = summary.step;
        d["tensors"] = summary.tensors;
        d["bytes"] = summary.bytes;
        return d;
      },
      py::arg("dir"), py::arg("out"), py::arg("force"));
}

}  // namespace ntp::python
