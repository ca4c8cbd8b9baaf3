nvcc -O2 -arch=sm_90a probe_partials.cu -lcublasLt -o probe_partials; ./probe_partials  # call 2 (r2-probe.txt)
