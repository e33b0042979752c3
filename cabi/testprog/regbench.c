/* regbench: what ibv_reg_mr costs on vrnicd, beside a memcpy of the same
 * size. Each round registers a fresh malloc'd buffer (its pages are copied
 * into a sealed memfd and remapped in place: memreg.c) and deregisters it
 * (the pages go back to private memory). Prints one line per size:
 *   regbench SIZE reg_us dereg_us memcpy_us per_MiB_reg_us */
#define _POSIX_C_SOURCE 200809L
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 50;
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	if (!pd) {
		fprintf(stderr, "regbench: no device\n");
		return 1;
	}
	size_t sizes[] = {4096, 1 << 20, 16 << 20};
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		double reg = 0, dereg = 0, cp = 0;
		char *src = malloc(n);
		memset(src, 7, n);
		for (int r = 0; r < rounds; r++) {
			char *buf = aligned_alloc(4096, n);
			memset(buf, r, n); /* touched, as a program's buffer is */
			double t0 = now_us();
			memcpy(buf, src, n);
			double t1 = now_us();
			struct ibv_mr *mr = ibv_reg_mr(pd, buf, n, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
			double t2 = now_us();
			if (!mr) {
				perror("ibv_reg_mr");
				return 1;
			}
			ibv_dereg_mr(mr);
			double t3 = now_us();
			cp += t1 - t0;
			reg += t2 - t1;
			dereg += t3 - t2;
			free(buf);
		}
		free(src);
		printf("regbench %zu %.1f %.1f %.1f %.1f\n", n, reg / rounds, dereg / rounds, cp / rounds,
		       reg / rounds / ((double)n / (1 << 20)));
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
