# cabi.mk: the drop-in C libraries (included by the Makefile). They build
# with the system compiler against Debian's rdma-core headers, so every
# struct programs see is laid out by <infiniband/verbs.h> itself; the layouts
# shared with the daemon come from cabi/include/vrnic_abi.h (generated).
CC           ?= cc
CABI_OUT     := out/cabi
CABI_LIBDIR  := lib/vrnicd
# The installed rdma-core whose ABI (version nodes, private node) we mirror.
IBVERBS_SYS  ?= $(firstword $(wildcard /usr/lib/$(shell $(CC) -dumpmachine)/libibverbs.so.1 /usr/lib64/libibverbs.so.1 /usr/lib/libibverbs.so.1))
CABI_WARN    := -Wall -Wextra -Werror -Wno-unused-parameter
CABI_CFLAGS  ?= -O2 -g
CABI_CPPFLAGS := -std=c11 -D_GNU_SOURCE -Icabi/include -Icabi/ibverbs
IBV_SRCS     := $(sort $(wildcard cabi/ibverbs/*.c))
IBV_OBJS     := $(IBV_SRCS:cabi/%.c=$(CABI_OUT)/%.o)
IBV_HDRS     := $(wildcard cabi/ibverbs/*.h) cabi/include/vrnic_abi.h

.PHONY: cabi cabi-test cabi-sanitize

# Without rdma-core's headers (a fresh machine) the library is not built and
# its tests skip, so make demo and make test still run: say so, do not fail.
CABI_HAVE_HDRS := $(shell echo '\#include <infiniband/verbs.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes)
ifeq ($(CABI_HAVE_HDRS)$(if $(IBVERBS_SYS),yes),yesyes)
cabi: $(CABI_LIBDIR)/libibverbs.so.1
else
cabi:
	@echo "cabi: rdma-core's headers or libibverbs.so.1 missing: the drop-in libibverbs is not built (make deps)"
endif

$(CABI_OUT)/ibverbs/%.o: cabi/ibverbs/%.c $(IBV_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CABI_CPPFLAGS) $(CABI_CFLAGS) $(CABI_WARN) -fPIC -pthread -c -o $@ $<

$(CABI_OUT)/libibverbs.map: cabi/mkmap.sh cabi/cabi.mk $(IBVERBS_SYS)
	@mkdir -p $(dir $@)
	cabi/mkmap.sh $(IBVERBS_SYS) >$@.tmp && printf '%s\n' \
		'VRNICD_PRIVATE_1 { global: vrnicd_cm_call; vrnicd_cm_call_fd;' \
		'	vrnicd_qp_handle; vrnicd_qp_by_num; vrnicd_dead; };' >>$@.tmp && mv $@.tmp $@

# --no-undefined-version: every symbol of the installed library must be
# defined here, or the link fails (a program linked BIND_NOW would fail at load).
$(CABI_LIBDIR)/libibverbs.so.1: $(IBV_OBJS) $(CABI_OUT)/libibverbs.map
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread -Wl,-soname,libibverbs.so.1 -Wl,--version-script=$(CABI_OUT)/libibverbs.map \
		-Wl,--no-undefined-version -Wl,--no-undefined -Wl,-z,now -o $@ $(IBV_OBJS)

# The C tests (the memory registry, under ASan/UBSan, + its timings).
cabi-test:
	cabi/test/run.sh

# The whole library again under AddressSanitizer and UBSan, for the Go
# tests that run Debian's programs on it (cabi-sanitize): a program loads
# it with the sanitizers' runtimes preloaded, as an unsanitized binary must.
CABI_SAN_OUT   := out/cabi-san
CABI_SAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
IBV_SAN_OBJS   := $(IBV_SRCS:cabi/%.c=$(CABI_SAN_OUT)/%.o)

$(CABI_SAN_OUT)/ibverbs/%.o: cabi/ibverbs/%.c $(IBV_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CABI_CPPFLAGS) $(CABI_SAN_FLAGS) $(CABI_WARN) -fPIC -pthread -c -o $@ $<

$(CABI_SAN_OUT)/lib/libibverbs.so.1: $(IBV_SAN_OBJS) $(CABI_OUT)/libibverbs.map
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread $(CABI_SAN_FLAGS) -Wl,-soname,libibverbs.so.1 \
		-Wl,--version-script=$(CABI_OUT)/libibverbs.map -Wl,--no-undefined-version -Wl,-z,now -o $@ $(IBV_SAN_OBJS)

# cabi-sanitize: Debian's programs and the test programs on the sanitized
# library (any ASan or UBSan report fails the test).
ifeq ($(CABI_HAVE_HDRS)$(if $(IBVERBS_SYS),yes),yesyes)
cabi-sanitize: $(CABI_SAN_OUT)/lib/libibverbs.so.1
	VRNIC_CABI_IBVERBS=$(CURDIR)/$(CABI_SAN_OUT)/lib/libibverbs.so.1 \
	VRNIC_CABI_PRELOAD="$$($(CC) -print-file-name=libasan.so):$$($(CC) -print-file-name=libubsan.so)" \
		$(GO) test -count=1 -run 'Pingpong|Perftest|DaemonGone|Pyverbs|Mixed|Devinfo|VerbsCoverage|Rdmacm|McastVerbs|MckeyDropin' ./cabi/
else
cabi-sanitize:
	@echo "cabi-sanitize: skipped: the drop-in libibverbs cannot be built here (make deps)"
endif

# ---- librdmacm.so.1 -----------------------------------------------------
# The drop-in librdmacm: cabi/rdmacm/*.c, linked against OUR libibverbs (its
# CM calls go over a context's connection to the daemon), with rdma-core's
# RDMACM_1.0..1.3 nodes generated from the installed librdmacm.so.1 as for
# libibverbs. It needs librdmacm-dev's headers and the installed library
# (for the map); without them only libibverbs is built, with a message.
RDMACM_SYS   ?= $(firstword $(wildcard /usr/lib/$(shell $(CC) -dumpmachine)/librdmacm.so.1 /usr/lib64/librdmacm.so.1 /usr/lib/librdmacm.so.1))
RCM_SRCS     := $(sort $(wildcard cabi/rdmacm/*.c))
RCM_OBJS     := $(RCM_SRCS:cabi/%.c=$(CABI_OUT)/%.o)
RCM_HDRS     := $(wildcard cabi/rdmacm/*.h) $(IBV_HDRS)
RCM_CPPFLAGS := $(CABI_CPPFLAGS) -Icabi/rdmacm
CABI_HAVE_RCM := $(shell echo '\#include <rdma/rdma_cma.h>' | $(CC) -E -x c - >/dev/null 2>&1 && echo yes)

ifeq ($(CABI_HAVE_HDRS)$(if $(IBVERBS_SYS),yes)$(CABI_HAVE_RCM)$(if $(RDMACM_SYS),yes),yesyesyesyes)
cabi: $(CABI_LIBDIR)/librdmacm.so.1
else ifeq ($(CABI_HAVE_HDRS)$(if $(IBVERBS_SYS),yes),yesyes)
cabi: cabi-no-rdmacm
.PHONY: cabi-no-rdmacm
cabi-no-rdmacm:
	@echo "cabi: rdma-core's <rdma/rdma_cma.h> or librdmacm.so.1 missing: the drop-in librdmacm is not built (make deps)"
endif

$(CABI_OUT)/rdmacm/%.o: cabi/rdmacm/%.c $(RCM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(RCM_CPPFLAGS) $(CABI_CFLAGS) $(CABI_WARN) -fPIC -pthread -c -o $@ $<

$(CABI_OUT)/librdmacm.map: cabi/mkmap.sh $(RDMACM_SYS)
	@mkdir -p $(dir $@)
	cabi/mkmap.sh $(RDMACM_SYS) >$@.tmp && mv $@.tmp $@

# Against the libibverbs.so.1 built above, by file name (-l:, there is no
# libibverbs.so link in lib/vrnicd), so DT_NEEDED is libibverbs.so.1 and the
# version references are ours (VRNICD_PRIVATE_1 included): a program then
# loads both from the one directory. No RPATH: LD_LIBRARY_PATH (vrnic-run)
# or the install directory decides, as for libibverbs. -rpath-link lets
# --no-undefined check libibverbs' own dependencies.
$(CABI_LIBDIR)/librdmacm.so.1: $(RCM_OBJS) $(CABI_OUT)/librdmacm.map $(CABI_LIBDIR)/libibverbs.so.1
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread -Wl,-soname,librdmacm.so.1 -Wl,--version-script=$(CABI_OUT)/librdmacm.map \
		-Wl,--no-undefined-version -Wl,--no-undefined -Wl,-z,now -o $@ $(RCM_OBJS) \
		-L$(CABI_LIBDIR) -l:libibverbs.so.1 -Wl,-rpath-link,$(CABI_LIBDIR)

# Sanitized, next to the sanitized libibverbs (out/cabi-san/lib), linked
# against it; cabi-sanitize's programs find both through that directory.
# No --no-undefined: the sanitizers' runtimes are preloaded, not linked.
RCM_SAN_OBJS := $(RCM_SRCS:cabi/%.c=$(CABI_SAN_OUT)/%.o)

$(CABI_SAN_OUT)/rdmacm/%.o: cabi/rdmacm/%.c $(RCM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(RCM_CPPFLAGS) $(CABI_SAN_FLAGS) $(CABI_WARN) -fPIC -pthread -c -o $@ $<

$(CABI_SAN_OUT)/lib/librdmacm.so.1: $(RCM_SAN_OBJS) $(CABI_OUT)/librdmacm.map $(CABI_SAN_OUT)/lib/libibverbs.so.1
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread $(CABI_SAN_FLAGS) -Wl,-soname,librdmacm.so.1 \
		-Wl,--version-script=$(CABI_OUT)/librdmacm.map -Wl,--no-undefined-version -Wl,-z,now -o $@ $(RCM_SAN_OBJS) \
		-L$(CABI_SAN_OUT)/lib -l:libibverbs.so.1 -Wl,-rpath-link,$(CABI_SAN_OUT)/lib

ifeq ($(CABI_HAVE_HDRS)$(if $(IBVERBS_SYS),yes)$(CABI_HAVE_RCM)$(if $(RDMACM_SYS),yes),yesyesyesyes)
cabi-sanitize: $(CABI_SAN_OUT)/lib/librdmacm.so.1
endif
