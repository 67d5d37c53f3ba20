"""Call 2: the raw-PTX variants of the shrunk hang (shrunk.sm_90.ptx beside this folder),
each launched alone by raw_ptx_launcher.rs (PTX_DIR=<dir> LIMIT=10). Usage: python3 variants.py OUTDIR"""
import re, sys
here = __file__.rsplit('/', 2)[0]
src = open(here + '/shrunk.sm_90.ptx').read()
out = sys.argv[1] + '/'
def w(name, s):
    open(out + name + '.ptx', 'w').write(s)
w('a_orig', src)
i = src.index('\tmov.b32 %r28, %r26;'); j = src.index('\tadd.u32 %r26, %r26, 1;')
w('b_loop1_empty', src[:i] + src[j:])
w('c_no_barrier_in_loop', src.replace('\tmov.b32 %r44, %r42;\n\tbarrier.sync 0;\n', '\tmov.b32 %r44, %r42;\n', 1))
w('d_no_redux', src.replace('\tredux.sync.xor.b32 %r49, %r50, %r19;\n', '\tmov.b32 %r49, %r50;\n'))
w('e_no_fault_atom', src.replace('\t@%p7 atom.global.cas.b32 %r36, [%rd6], 0, 5;\n', ''))
w('f_no_fault_exits', src.replace('$L__3:\n\t@!%p0 bra $L__2;\n\texit;\n', '$L__3:\n').replace('$L__6:\n\t@!%p0 bra $L__5;\n\texit;\n', '$L__6:\n'))
i = src.index('\tor.b32 %r45, %r17, 0;'); j = src.index('\tadd.u32 %r42, %r42, 1;')
w('g_loop2_no_math', src[:i] + src[j:])
w('h_no_final_barrier', src.replace('$L__5:\n\tbarrier.sync 0;\n', '$L__5:\n'))
w('i_loop1_no_byte_loads', re.sub(r'\t@%p[3-6] ld\.global\.u8 %r3[2-5], \[%rd12\+[0-3]\];\n', '', src))
w('j_bar_sync', src.replace('barrier.sync 0;', 'bar.sync 0;'))
