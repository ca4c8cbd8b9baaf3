// A kernel timeline of any CUDA program, graph replays included: a CUPTI activity tracer the CUDA driver loads
// through CUDA_INJECTION64_PATH. It records every kernel and memory copy (start and end on the GPU, the graph node
// it replays) and the host's cudaGraphLaunch / cudaStreamSynchronize calls, and writes them as CSV lines to
// $TIMELINE_CSV when the program exits. A probe for docs/benchmarks.md (where a decode step's time goes inside
// its CUDA graph), not part of the build:
//   g++ -std=c++17 -O2 -shared -fPIC timeline_injection.cpp -I/usr/local/cuda/include -L/usr/local/cuda/lib \
//       -lcupti -o libtimeline.so
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

std::mutex lines_mutex;
std::vector<std::string> lines;

void CUPTIAPI give_buffer(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = kBytes;
  *max_records = 0;
}

void CUPTIAPI take_buffer(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<std::string> batch;
  char line[1024];
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      std::snprintf(line, sizeof line, "kernel,%llu,%llu,%u,%u,%llu,%d,%d,\"%s\"", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->correlationId, k->graphId, (unsigned long long)k->graphNodeId,
                    k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ, k->name);
      batch.emplace_back(line);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      std::snprintf(line, sizeof line, "memcpy,%llu,%llu,%u,%u,%llu,%llu,%d,\"kind %d\"", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->correlationId, m->graphId, (unsigned long long)m->graphNodeId,
                    (unsigned long long)m->bytes, 0, static_cast<int>(m->copyKind));
      batch.emplace_back(line);
    } else if (record->kind == CUPTI_ACTIVITY_KIND_RUNTIME) {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
      const char* name = nullptr;
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
      if (name && (std::strstr(name, "GraphLaunch") || std::strstr(name, "StreamSynchronize"))) {
        std::snprintf(line, sizeof line, "api,%llu,%llu,%u,0,0,0,0,\"%s\"", (unsigned long long)a->start,
                      (unsigned long long)a->end, a->correlationId, name);
        batch.emplace_back(line);
      }
    }
  }
  std::free(buffer);
  std::lock_guard lock(lines_mutex);
  lines.insert(lines.end(), batch.begin(), batch.end());
}

void write_out() {
  cuptiActivityFlushAll(1);
  const char* path = std::getenv("TIMELINE_CSV");
  FILE* f = std::fopen(path ? path : "timeline.csv", "w");
  if (!f) return;
  std::fprintf(f, "what,start,end,correlation,graph,node,grid_or_bytes,block,name\n");
  std::lock_guard lock(lines_mutex);
  for (const auto& l : lines) std::fprintf(f, "%s\n", l.c_str());
  std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection() {
  cuptiActivityRegisterCallbacks(give_buffer, take_buffer);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  std::atexit(write_out);
  return 1;
}
