#!/usr/bin/env python3
# Writes the seed corpora of the fuzz targets (fuzz/corpus/TARGET/), kept in the tree.
# Rerun after changing it, or after the fault relay's canned replies change
# (tests/support/relay.c, canned_table: the relay-* seeds are its bytes, exactly):
#     rm -rf fuzz/corpus && python3 fuzz/make_seeds.py
# Inputs the fuzzer found later are merged in with FUZZ_MERGE=1 tools/fuzz.sh.
import ast
import os
import re

here=os.path.dirname(os.path.abspath(__file__))
root=os.path.join(here,'corpus')
def put(target, name, data):
    d=os.path.join(root,target); os.makedirs(d,exist_ok=True)
    if isinstance(data,str): data=data.encode('latin-1')
    open(os.path.join(d,name),'wb').write(data)

# ---- URLs
urls = {
 'tcp-ip':'redis://127.0.0.1:6379', 'tcp-host':'redis://localhost', 'tcp-db':'redis://h1:6379/0',
 'tcp-pass':'redis://:pass@host:6379/2', 'tcp-acl':'redis://user:pass@host:6380/15',
 'tcp-pct':'redis://us%40er:p%2Cw%3A@host', 'ipv6':'redis://[::1]:6379', 'ipv6-noport':'redis://[::1]',
 'ipv6-v4':'redis://[::ffff:127.0.0.1]:7000/3', 'ipv6-zone':'redis://[fe80::1%25eth0]:6379',
 'ipv6-open':'redis://[::1:6379', 'ipv6-junk':'redis://[::1]x', 'unix':'unix:///tmp/redis.sock',
 'unix-pass-db':'unix://:pw@/var/run/redis.sock?db=3', 'unix-rel':'unix://tmp/redis.sock',
 'unix-query':'unix:///s?x=1', 'unix-user':'unix://u:pw@/s', 'rediss':'rediss://host:6380',
 'bare-user':'redis://user@host', 'scheme':'http://x', 'port0':'redis://host:0',
 'port-big':'redis://host:65536', 'port-max':'redis://host:65535', 'port-empty':'redis://host:',
 'db-neg':'redis://host/-1', 'db-max':'redis://host/2147483647', 'db-over':'redis://host/2147483648',
 'list':'redis://a:1,redis://b:2,unix:///c', 'list-spaces':'redis://h:6379, redis://h2:6380',
 'list-empty':'redis://a,,redis://b', 'empty-pass':'redis://:@h', 'bad-pct':'redis://%zz:pw@h',
 'nul-pct':'redis://:p%00w@h', 'at-in-pass':'redis://:p@ss@h/1', 'slash-in-pass':'redis://:a/b@h',
 'host-253':'redis://'+'a'*253+':1', 'host-254':'redis://'+'a'*254,
 'path-107':'unix:///'+'p'*106, 'path-108':'unix:///'+'p'*107, 'empty':'', 'scheme-only':'redis://',
 'underscore':'redis://my_host-1.example:6379/1',
 'rediss-params':'rediss://u:p@h:6380/2?cacert=/ca.pem&cacertdir=/ca&cert=/c.pem&key=/k.pem&sni=s.example&insecure=0',
 'rediss-v6':'rediss://[::1]:6380?insecure=1', 'rediss-pct':'rediss://h?sni=a%26b&cacert=%2Fx',
 'rediss-unknown':'rediss://h?x=1', 'rediss-cert-only':'rediss://h?cert=/c.pem',
 'rediss-twice':'rediss://h?sni=a&sni=b', 'rediss-empty':'rediss://h?', 'redis-query':'redis://h?sni=a',
 'sentinel':'redis-sentinel://s1', 'sentinel-full':'redis-sentinel://u:p@s1:5000,[::1]:5001,s3/orders?sentinel_user=su&sentinel_password=sp&db=2',
 'sentinel-tls':'rediss-sentinel://s1/m?cacert=/ca.pem&sni=x', 'sentinel-list':'redis-sentinel://s1, s2/a,redis://h,redis-sentinel://s3',
 'sentinel-name':'redis-sentinel://s1/a%20b', 'sentinel-many':'redis-sentinel://a,b,c,d,e,f,g,h,i/m',
 'sentinel-empty':'redis-sentinel://,/m', 'sentinel-db':'redis-sentinel://s/m?db=1&db=2',
 'cluster':'redis-cluster://n1', 'cluster-full':'redis-cluster://u:p@n1:7000, [::1]:7001,n3/',
 'cluster-tls':'rediss-cluster://n1?cacert=/ca.pem&sni=x', 'cluster-list':'redis-cluster://n1,n2,redis://h,redis-cluster://m1',
 'cluster-db':'redis-cluster://n1/1', 'cluster-param':'redis-cluster://n1?sni=x',
}
for k,v in urls.items(): put('fuzz_url', k, v)

# ---- durations
durs = ['250ms','1.5s','0.5m','2h','0','1','forever','1.0005s','1.5ms','9223372036854775807ms',
 '9223372036854775808ms','9223372036854775.807s','2562047788015215h','2562047788015216h',
 '0.0000001h','0.0000005h','1e3','-1s','.5s','1.','1.s',' 1s','1s ','nan','inf','0x10','10',
 '2147483647ms','2147483648ms','9ms','00012ms','1.2345678h','0.001s','0.0001s','1m','3.6e6','1.0s',
 '99999999999999999999x','1.50000000000000000000000s','0.3s','1d','']
for i,v in enumerate(durs): put('fuzz_duration', 'd%02d'%i, v)

# ---- replies
def bulk(s):
    if isinstance(s,str): s=s.encode('latin-1')
    return b'$%d\r\n'%len(s)+s+b'\r\n'
info = bulk('# Server\r\nredis_version:7.0.15\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\nuptime_in_seconds:100\r\n# Memory\r\nmaxmemory_policy:noeviction\r\n')
info_evict = bulk('# Server\r\nrun_id:fedcba9876543210fedcba9876543210fedcba98\r\nuptime_in_seconds:0\r\n# Memory\r\nmaxmemory_policy:allkeys-lru\r\n')
info_volatile = bulk('run_id:x\r\nmaxmemory_policy:volatile-ttl\r\nuptime_in_seconds:99999999999999999999\r\n')
errors = {
 'loading':'-LOADING Redis is loading the dataset in memory','busy':'-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.',
 'readonly':"-READONLY You can't write against a read only replica.",'noscript':'-NOSCRIPT No matching script. Please use EVAL.',
 'oom':"-OOM command not allowed when used memory > 'maxmemory'.",'misconf':'-MISCONF Redis is configured to save RDB snapshots, but it is currently not able to persist on disk.',
 'noperm':"-NOPERM this user has no permissions to run the 'evalsha' command",'wrongtype':'-WRONGTYPE Operation against a key holding the wrong kind of value',
 'moved':'-MOVED 3999 127.0.0.1:6381','ask':'-ASK 3999 127.0.0.1:6381','crossslot':"-CROSSSLOT Keys in request don't hash to the same slot",
 'noauth':'-NOAUTH Authentication required.','wrongpass':'-WRONGPASS invalid username-password pair or user is disabled.',
 'err-invalid-password':'-ERR invalid password','err-nopass':'-ERR Client sent AUTH, but no password is set',
 'masterdown':"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
 'tryagain':'-TRYAGAIN Multiple keys request during rehashing of slot','clusterdown':'-CLUSTERDOWN The cluster is down',
 'noreplicas':'-NOREPLICAS Not enough good replicas to write.','unblocked':'-UNBLOCKED force unblock',
 'err-unknown':"-ERR unknown command 'EVALSHA'",'err-empty':'-','busygroup':'-BUSYGROUP Consumer Group name already exists',
}
# The fault relay's canned replies (tests/support/relay.c, canned_table), byte for byte.
src=open(os.path.join(here,'..','tests','support','relay.c')).read()
table=src[src.index('canned_table[FR_CANNED_COUNT] = {'):]
table=table[:table.index('};')]
relay={}
# CANNED(ID, "bytes", FLAGS), or ERROR_REPLY(ID, "message"): "-ID message\r\n".
for m in re.finditer(r'\b(CANNED|ERROR_REPLY)\(\s*(\w+),\s*((?:"(?:[^"\\]|\\.)*"\s*)+)(?:,\s*([^)]*))?\)', table):
    name=m.group(2).lower().replace('_','-')
    parts=re.findall(r'"((?:[^"\\]|\\.)*)"', m.group(3))
    text=''.join(ast.literal_eval('"'+x+'"') for x in parts)
    if m.group(1) == 'ERROR_REPLY': text = '-'+m.group(2)+' '+text+'\r\n'
    data=text.encode('latin-1')
    if 'CAN_STREAM' in (m.group(4) or ''): data += b'A'*200
    relay[name]=data
assert len(relay) >= 25, relay.keys()
extra = {k:(v+'\r\n').encode() for k,v in errors.items() if k not in relay}
extra.update({
 'int-for-bulk':b':1\r\n','bulk-for-int':bulk('1700000000000000'),'status-for-int':b'+OK\r\n','nil':b'$-1\r\n',
 'nil-array':b'*-1\r\n','empty-array':b'*0\r\n','huge-array':b'*2147483647\r\n','neg-array':b'*-2\r\n',
 'array-over-cap':b'*65\r\n'+b':1\r\n'*65,'array-at-cap':b'*64\r\n'+b':1\r\n'*64,
 'huge-bulk-stream':b'$1000000000\r\n'+b'A'*200,'neg-bulk':b'$-2\r\n','empty-bulk':b'$0\r\n\r\n',
 'http-banner':b'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n',
 'int-max':b':9223372036854775807\r\n','int-min':b':-9223372036854775808\r\n','int-overflow':b':99999999999999999999\r\n',
 'int-junk':b':12a\r\n','no-crlf':b':1\n','bare-cr':b'+OK\r','type-junk':b'?\r\n',
 'nested-7':b'*1\r\n'*7+b':1\r\n','nested-8':b'*1\r\n'*8+b':1\r\n','nested-9':b'*1\r\n'*9+b':1\r\n',
 'mixed-array':b'*5\r\n:1\r\n$3\r\nabc\r\n+OK\r\n-ERR x\r\n$-1\r\n',
})
token='0'*32
inspect_held = b'*3\r\n'+bulk(token+' host:42 label')+b':9000\r\n'+bulk('1700000000000001')
inspect_free = b'*3\r\n'+bulk('')+b':-2\r\n'+bulk('0')
inspect_absurd = b'*3\r\n'+bulk(token)+b':9223372036854775807\r\n'+bulk('18446744073709551615')
inspect_foreign = b'*3\r\n'+bulk('not-a-dlock-value')+b':-1\r\n'+bulk('-5')
inspect_shapes = [b'*2\r\n'+bulk('')+b':1\r\n', b'*3\r\n:1\r\n:1\r\n:1\r\n', b'*3\r\n'+bulk('')+bulk('x')+bulk('1')]

# fuzz_reply: the whole stream of one connection
put('fuzz_reply','info', info)
put('fuzz_reply','info-evict', info_evict+b':1\r\n')
put('fuzz_reply','info-volatile', info_volatile+b':1\r\n')
put('fuzz_reply','info-error', b'-NOPERM this user has no permissions to run the info command\r\n:1\r\n')
put('fuzz_reply','info-noauth', b'-NOAUTH Authentication required.\r\n')
put('fuzz_reply','auth-select-info', b'+OK\r\n+OK\r\n'+info+b':1\r\n')
put('fuzz_reply','auth-refused', b'-WRONGPASS invalid username-password pair\r\n+OK\r\n'+info)
put('fuzz_reply','select-refused', b'+OK\r\n-ERR DB index is out of range\r\n'+info)
put('fuzz_reply','select-loading', b'+OK\r\n-LOADING Redis is loading\r\n'+info)
for k,v in relay.items():
    put('fuzz_reply','relay-'+k, v)
    put('fuzz_reply','info-relay-'+k, info+v)
for k,v in extra.items():
    put('fuzz_reply','resp-'+k, v)
    put('fuzz_reply','info-resp-'+k, info+v)
put('fuzz_reply','inspect-held', inspect_held)
put('fuzz_reply','pipelined', info+b':1700000000000000\r\n:1\r\n'+inspect_held+b':1\r\n')

# fuzz_lock: one segment per round, separated by |||: acquire (after INFO), extend, check
# (inspect), release, inspect, fenced set
S=b'|||'
grant=b':1700000000000001\r\n'
inspect_ours = b'*3\r\n'+bulk(token+' h:1')+b':9000\r\n'+bulk('1700000000000001')
inspect_ours_absurd = b'*3\r\n'+bulk(token+' h:1')+b':9223372036854775807\r\n'+bulk('99999999999999999999999')
inspect_ours_neg = b'*3\r\n'+bulk(token)+b':-9223372036854775808\r\n'+bulk('-1')
def conv(*segs): return S.join(segs)
put('fuzz_lock','granted-all-ok', conv(info+grant, b':1\r\n', inspect_ours, b':1\r\n', inspect_free, b':1\r\n'))
put('fuzz_lock','granted-lost', conv(info+grant, b':0\r\n', b':0\r\n', inspect_held, b':0\r\n'))
put('fuzz_lock','granted-foreign-holder', conv(info+grant, b':1\r\n', inspect_held, b':0\r\n', inspect_held, b':0\r\n'))
put('fuzz_lock','check-ours-absurd', conv(info+grant, b':1\r\n', inspect_ours_absurd, b':1\r\n', inspect_ours_absurd, b':1\r\n'))
put('fuzz_lock','check-ours-negative', conv(info+grant, b':1\r\n', inspect_ours_neg, b':1\r\n', inspect_ours_neg, b':1\r\n'))
put('fuzz_lock','granted-absurd', conv(info+grant, b':1\r\n', inspect_absurd, b':1\r\n', inspect_absurd, b':1\r\n'))
put('fuzz_lock','refused', conv(info+b':-5000\r\n', inspect_held, b':0\r\n'))
put('fuzz_lock','refused-no-ttl', conv(info+b':0\r\n', inspect_foreign, b':1\r\n'))
put('fuzz_lock','noscript-then-eval', conv(info+b'-NOSCRIPT No matching script\r\n'+grant, b'-NOSCRIPT No matching script\r\n:1\r\n', inspect_ours, b':1\r\n', inspect_free, b':1\r\n'))
put('fuzz_lock','noscript-twice', conv(info+b'-NOSCRIPT No matching script\r\n-NOSCRIPT No matching script\r\n'))
put('fuzz_lock','fence-min', conv(info+b':-9223372036854775808\r\n'))
put('fuzz_lock','fence-max', conv(info+b':9223372036854775807\r\n', b':1\r\n', inspect_absurd, b':1\r\n'))
put('fuzz_lock','out-of-step', conv(info+grant+b':1\r\n:1\r\n', b':1\r\n', inspect_ours))
put('fuzz_lock','split-reply', conv(info+b':17000', b'00000000001\r\n', b':1\r\n'))
put('fuzz_lock','reconnect-each-round', conv(info+grant, info+b':1\r\n', info+inspect_ours, info+b':1\r\n'))
put('fuzz_lock','evicting', conv(info_evict+grant, b':1\r\n'))
put('fuzz_lock','info-refused', conv(b'-NOPERM no INFO for you\r\n'+grant, b':1\r\n'))
for i,sh in enumerate(inspect_shapes):
    put('fuzz_lock','inspect-shape-%d'%i, conv(info+grant, b':1\r\n', sh, b':1\r\n', sh))
# an operator's calls after those: a dlock_list page (or two), a break, its record
def f(x):
    if isinstance(x,str): x=x.encode('latin-1')
    return str(len(x)).encode()+b':'+x
def rec(key, value, pttl, fence, queue, limit, count, listed=()):
    r=f(key)+f(value)+f(str(pttl))+f(str(fence))+f(str(queue))+f(limit)+f(str(count))+f(str(len(listed)))
    for tok,ms,desc in listed: r+=f(tok)+f(str(ms))+f(desc)
    return r
sig='a'*40
def page(cursor, skip, recs): return b'*4\r\n'+bulk(cursor)+b':%d\r\n'%skip+bulk(recs)+bulk(sig)
ex=rec('dlock:{fz}', token+' h:1 job', 9000, 1700000000000001, 1, '', 0)
sh=rec('dlock:{sh}', 'shared', 5000, 7, 2, '3', 2, [('1'*32, 5000, 'h:2 a'), ('2'*32, 100, 'h:3 b')])
hexname=rec('dlock:{%7d78}', token+' h:1', -1, 0, 0, '', 0)
brk=b'*4\r\n:1\r\n'+bulk(token+' h:1 job')+bulk('1700000000000009')+b':1700000000000\r\n'
record=b'*10\r\n'+b''.join(bulk(x) for x in ['at_ms','1700000000000','by','h:9','reason','hung','holder',token+' h:1 job','fence','1700000000000009'])
ops=[info+grant, b':1\r\n', inspect_ours, b':1\r\n', inspect_free, b':1\r\n']
put('fuzz_lock','operators', conv(*ops, page('0', 0, ex+sh+hexname), brk, record))
put('fuzz_lock','operators-two-pages', conv(*ops, page('17', 0, ex), page('17', 1, sh), page('0', 0, hexname), b'*1\r\n:0\r\n', b'*0\r\n'))
put('fuzz_lock','operators-bad-page', conv(*ops, page('0', 0, b'99:x'), b'*2\r\n:1\r\n:1\r\n', b'-ERR no'))
for k,v in relay.items():
    put('fuzz_lock','relay-'+k, info+v)
    put('fuzz_lock','relay-after-grant-'+k, conv(info+grant, v, v, v, v))
for k,v in extra.items():
    put('fuzz_lock','resp-'+k, info+v)

# ---- dlockd's requests (fuzz_resp): the first byte picks the piece size (byte % 64 + 1),
# the rest is what a client sends.
def mb(*args):
    out=b'*%d\r\n'%len(args)
    for a in args:
        a=a if isinstance(a,bytes) else a.encode()
        out+=b'$%d\r\n%s\r\n'%(len(a),a)
    return out
requests = {
 'ping': mb('PING'), 'lock': mb('LOCK','name','TTL','30000','WAIT','5000','LABEL','job'),
 'unlock': mb('UNLOCK','name','0123456789abcdef0123456789abcdef'),
 'pipeline': mb('PING')*5+mb('ECHO','x')*3+mb('LOCKINFO','n'),
 'inline': b'PING\r\nLOCK  name\tTTL 100\nQUIT\r\n', 'inline-empty': b'\r\n\n\r\nPING\n',
 'empty-mb': b'*0\r\n*-1\r\n'+mb('PING'), 'nul-arg': mb('ECHO',b'a\0b\r\n'),
 'huge-count': b'*2147483647\r\n', 'huge-bulk': b'*2\r\n$4\r\nECHO\r\n$1073741824\r\n',
 'too-many': b'*17\r\n'+b'$1\r\nx\r\n'*17, 'bulk-max': mb('ECHO','y'*64), 'bulk-over': mb('ECHO','y'*65),
 'inline-long': b'x'*200, 'bad-dollar': b'*1\r\n+OK\r\n', 'no-crlf': b'*1\r\n$4\r\nPINGxx',
 'neg-bulk': b'*1\r\n$-1\r\n', 'leading-zero': b'*01\r\n$04\r\nPING\r\n', 'lf-only': b'*1\n$4\nPING\n',
 'partial': mb('LOCK','n')[:-3], 'long-header': b'*'+b'1'*40+b'\r\n',
}
for i,(k,v) in enumerate(sorted(requests.items())):
    put('fuzz_resp',k,bytes([i*7%256])+v)

# ---- a cluster's redirections (first byte even) and slot maps (odd)
def node(host, port, nid=b'0123456789abcdef0123456789abcdef01234567'):
    return b'*3\r\n'+bulk(host)+b':%d\r\n'%port+bulk(nid)
def rng(a, b, *nodes):
    return b'*%d\r\n'%(2+len(nodes))+b':%d\r\n:%d\r\n'%(a,b)+b''.join(nodes)
three = b'*3\r\n'+rng(0,5460,node('127.0.0.1',7000),node('127.0.0.1',7003))+rng(5461,10922,node('127.0.0.1',7001))+rng(10923,16383,node('127.0.0.1',7002))
cluster = {
 'moved':b'\x00MOVED 3999 127.0.0.1:6381', 'ask':b'\x00ASK 3999 127.0.0.1:6381',
 'moved-self':b'\x00MOVED 3999 :6381', 'moved-v6':b'\x00MOVED 12 ::1:7000',
 'moved-slot-big':b'\x00MOVED 16384 h:1', 'moved-port0':b'\x00MOVED 1 h:0',
 'moved-junk':b'\x00MOVED x h:1', 'ask-noport':b'\x02ASK 1 h', 'tryagain':b'\x00TRYAGAIN Multiple keys',
 'map-three':b'\x01'+three, 'map-twice':b'\x01'+three+three,
 'map-empty-host':b'\x01*1\r\n'+rng(0,16383,node('',7000)),
 'map-unknown-host':b'\x01*1\r\n'+rng(0,100,node('?',7000)),
 'map-reversed':b'\x01*1\r\n'+rng(9,3,node('h',1)), 'map-out':b'\x01*1\r\n'+rng(0,16384,node('h',1)),
 'map-nul-host':b'\x01*1\r\n'+rng(0,16383,node('\x00127.0.0.', 7000)),
 'map-short':b'\x01*1\r\n*2\r\n:0\r\n:1\r\n', 'map-error':b'\x01-ERR This instance has cluster support disabled\r\n',
 'map-many':b'\x01*70\r\n'+b''.join(rng(k,k,node('10.0.0.%d'%k,7000)) for k in range(70)),
}
for k,v in cluster.items(): put('fuzz_cluster', k, v)
