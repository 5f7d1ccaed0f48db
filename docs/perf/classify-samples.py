#!/usr/bin/env python3
"""Group perf samples of spool serve by area. usage: perf script -F comm,tid,ip,sym,dso -i X | classify.py sqlite_syms.txt"""
import sys, re, collections
sqlite = set(open(sys.argv[1]).read().split()) if len(sys.argv) > 1 else set()

SYSCALL = re.compile(r'^__x64_sys_(\w+)|^__do_sys_(\w+)|^__se_sys_(\w+)')
def kernel_area(frames):
    syscall = None
    for sym, dso in frames:
        if dso != '[kernel.kallsyms]':
            break
        m = SYSCALL.match(sym)
        if m:
            syscall = next(g for g in m.groups() if g)
    names = ' '.join(s for s, d in frames if d == '[kernel.kallsyms]')
    if syscall in ('fsync', 'fdatasync', 'sync_file_range'):
        return 'kernel: fsync'
    if syscall in ('futex',):
        return 'futex/sched/thread switches'
    if syscall in ('epoll_wait', 'epoll_pwait', 'epoll_ctl'):
        return 'kernel: epoll (tokio I/O driver)'
    if syscall in ('mmap', 'munmap', 'madvise', 'brk', 'mprotect', 'mremap'):
        return 'allocation (malloc/free, kernel mm)'
    if syscall in ('sched_yield', 'nanosleep', 'clock_nanosleep'):
        return 'futex/sched/thread switches'
    if 'tcp_' in names or 'sock_' in names or syscall in ('sendto', 'recvfrom', 'sendmsg', 'recvmsg', 'accept4', 'writev', 'readv'):
        return 'kernel: TCP loopback send/recv'
    if 'eventfd' in names:
        return 'futex/sched/thread switches'
    if syscall in ('pwrite64', 'pread64', 'write', 'read', 'ftruncate', 'fcntl', 'openat', 'newfstat', 'fstat', 'close', 'lseek', 'unlink', 'statx', 'newfstatat', 'access', 'getdents64', 'fallocate'):
        return 'kernel: file I/O (pwrite/pread/fcntl locks/…)'
    if syscall:
        return 'kernel: other syscall (%s)' % syscall
    if 'page_fault' in names or 'exc_page_fault' in names:
        return 'allocation (malloc/free, kernel mm)'
    if re.search(r'schedule|finish_task_switch|__switch_to|try_to_wake_up', names):
        return 'futex/sched/thread switches'
    return 'kernel: other (irq/softirq/timer)'

ALLOC = re.compile(r'^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|__libc_malloc|__libc_free|__libc_realloc|__libc_calloc|tcache_\w+|unlink_chunk|alloc_perturb|__rust_alloc|__rust_dealloc|__rust_realloc|__rdl_\w+|_int_free_merge_chunk|_int_free_create_chunk|_int_free_maybe_consolidate|arena_get2|sysmalloc)')
MEM = re.compile(r'^(__memmove|__memcpy|__memset|memcpy|memmove|memset|__memcmp|memcmp|__memchr|__strlen|strlen|__strchr|__wmemset|__memrchr|__strcmp|bcmp|__nss|__bzero)')
def user_area(sym, dso):
    if sym.split('.')[0] in sqlite or sym.startswith('sqlite3') or 'rusqlite' in sym or 'libsqlite3' in sym:
        return 'SQLite (incl. rusqlite)'
    if ALLOC.match(sym) or 'alloc::alloc' in sym or '__rust_alloc' in sym:
        return 'allocation (malloc/free, kernel mm)'
    if MEM.match(sym):
        return None  # memcpy etc: attributed to caller below
    if 'pthread_mutex' in sym or 'pthread_cond' in sym or sym.startswith('__lll_') or 'futex' in sym or 'parking_lot' in sym or 'std::sys::sync' in sym or 'std::sync::' in sym:
        return 'futex/sched/thread switches'
    if 'serde_json' in sym or 'serde::' in sym:
        return 'JSON (serde/serde_json)'
    if 'tracing' in sym:
        return 'tracing'
    if 'notify' in sym or 'Notifier' in sym or 'subscription' in sym.lower() or 'recent::' in sym:
        return 'notifier/subscriptions/recent'
    if re.search(r'hyper|axum|tower|http::|httparse|matchit|http_body', sym):
        return 'hyper/axum/tower request path'
    if 'tokio' in sym:
        return 'tokio runtime (scheduler, timers, channels)'
    if 'spool_embedded' in sym:
        return 'spool embedded writer/db (Rust)'
    if 'spool' in sym:
        return 'spool other (Rust)'
    if sym.startswith('syscall') or sym in ('__GI___libc_write', 'write', 'read', '__libc_pwrite64', '__libc_pread64', '__fsync', 'fsync', 'epoll_wait', '__send', 'recv', '__libc_recv', '__libc_send', 'fcntl64', '__libc_fcntl64'):
        return 'libc syscall wrappers'
    if dso.startswith('libc') or dso.startswith('ld-linux'):
        return 'libc other'
    if sym == '[unknown]':
        return 'unknown'
    return 'other Rust (std/core/uuid/…)'

def area(frames):
    sym, dso = frames[0]
    if dso == '[kernel.kallsyms]':
        return kernel_area(frames)
    a = user_area(sym, dso)
    if a is None:  # memcpy etc: by first non-libc caller
        for s, d in frames[1:]:
            if not (d.startswith('libc') or d.startswith('ld-linux')):
                b = user_area(s, d)
                if b:
                    return 'memcpy/memset in ' + b
        return 'memcpy/memset (caller unknown)'
    return a

def samples(stream):
    head, frames = None, []
    for line in stream:
        line = line.rstrip('\n')
        if not line.strip():
            if head is not None and frames:
                yield head, frames
            head, frames = None, []
        elif not line.startswith((' ', '\t')):
            head = line.split()[0]
            frames = []
        else:
            parts = line.strip().split(None, 1)
            rest = parts[1] if len(parts) > 1 else ''
            m = re.match(r'(.*?)(?:\+0x[0-9a-f]+)? \((.*)\)$', rest)
            sym, dso = (m.group(1), m.group(2).rsplit('/', 1)[-1]) if m else (rest, '?')
            frames.append((sym, dso))
    if head is not None and frames:
        yield head, frames

by = collections.Counter(); per = collections.defaultdict(collections.Counter); comms = collections.Counter()
for comm, frames in samples(sys.stdin):
    a = area(frames)
    c = 'spool-writer' if comm == 'spool-writer' else ('tokio-rt-worker' if comm.startswith('tokio-r') else 'other threads')
    by[a] += 1; per[c][a] += 1; comms[c] += 1
n = sum(by.values())
cols = ['spool-writer', 'tokio-rt-worker', 'other threads']
print('| area | all % | ' + ' | '.join(f'{c} % of all' for c in cols) + ' |')
print('|---|---:|' + '---:|' * len(cols))
for a, k in by.most_common():
    print(f'| {a} | {100*k/n:.1f} | ' + ' | '.join(f'{100*per[c][a]/n:.1f}' for c in cols) + ' |')
print(f'| **total samples {n}** | 100 | ' + ' | '.join(f'{100*comms[c]/n:.1f}' for c in cols) + ' |')
