/* cases.h: the named-case harness of testprog's programs (verbs.c,
 * cmevents.c). run() runs a case, which ends by returning (ok), fail()
 * or skip(); each prints one line, "ok CASE", "FAIL CASE: why" or
 * "SKIP CASE: why", which the Go tests read. A program sets `only` (one
 * case alone; "setup" and "teardown" still run) and `skips` ("case=why;
 * case=why") from its environment, and start_alarm() against hangs. */
#ifndef VRNIC_TESTPROG_CASES_H
#define VRNIC_TESTPROG_CASES_H

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *volatile case_name = "setup";
static void (*volatile case_fn)(void);
static jmp_buf case_jmp;
static int nfail, nok, nskip;
static const char *only;  /* run this case alone (with setup and teardown) */
static const char *skips; /* "case=why;case=why": cases skipped, and why */
static unsigned alarm_secs;

static void fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("FAIL %s: ", case_name);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	longjmp(case_jmp, 1);
}

static void skip(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2), unused));
static void skip(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("SKIP %s: ", case_name);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	fflush(stdout);
	longjmp(case_jmp, 2);
}

/* info: a note about the case, "info CASE: ...". */
static void info(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("info %s: ", case_name);
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
}

#define CHECK(cond, ...)                                                                                           \
	do {                                                                                                       \
		if (!(cond))                                                                                       \
			fail(__VA_ARGS__);                                                                         \
	} while (0)

/* skipped says whether skips names the case, printing its SKIP line. */
static int skipped(const char *name)
{
	size_t n = strlen(name);
	for (const char *s = skips; s && *s;) {
		const char *end = strchr(s, ';');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		if (len > n && !strncmp(s, name, n) && s[n] == '=') {
			printf("SKIP %s: %.*s\n", name, (int)(len - n - 1), s + n + 1);
			nskip++;
			return 1;
		}
		s += len + (end ? 1 : 0);
	}
	return 0;
}

static void run(const char *name, void (*fn)(void))
{
	if (only && strcmp(name, only) && strcmp(name, "setup") && strcmp(name, "teardown"))
		return;
	if (skipped(name))
		return;
	case_name = name;
	case_fn = fn;
	switch (setjmp(case_jmp)) {
	case 0:
		case_fn();
		printf("ok %s\n", case_name);
		nok++;
		break;
	case 1:
		nfail++;
		break;
	default:
		nskip++;
		break;
	}
	fflush(stdout);
}

static void on_alarm(int sig)
{
	(void)sig;
	char msg[160];
	int n = snprintf(msg, sizeof(msg), "FAIL %s: timed out (%u s alarm)\n", case_name, alarm_secs);
	if (write(1, msg, (size_t)n) < 0) {
	}
	_exit(1);
}

/* start_alarm ends the program with a FAIL line if it runs past secs. */
static void start_alarm(unsigned secs)
{
	alarm_secs = secs;
	signal(SIGALRM, on_alarm);
	alarm(secs);
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
