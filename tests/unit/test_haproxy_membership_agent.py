"""The by-size membership bench's readings inside the node: when servers count
as settled in HAProxy's stats, and the garbage collections timed inside an
update."""

from __future__ import annotations

import gc
import threading

from harness.cluster.agent.haproxy_membership import _Collections, settled_ports

# `show stat`'s header line as HAProxy 2.8.25 prints it.
HEADER = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,bin,bout,dreq,dresp,ereq,econ,eresp,wr"
    "etr,wredis,status,weight,act,bck,chkfail,chkdown,lastchg,downtime,qlimit,pid,iid,sid"
    ",throttle,lbtot,tracked,type,rate,rate_lim,rate_max,check_status,check_code,check_du"
    "ration,hrsp_1xx,hrsp_2xx,hrsp_3xx,hrsp_4xx,hrsp_5xx,hrsp_other,hanafail,req_rate,req"
    "_rate_max,req_tot,cli_abrt,srv_abrt,comp_in,comp_out,comp_byp,comp_rsp,lastsess,last"
    "_chk,last_agt,qtime,ctime,rtime,ttime,agent_status,agent_code,agent_duration,check_d"
    "esc,agent_desc,check_rise,check_fall,check_health,agent_rise,agent_fall,agent_health"
    ",addr,cookie,mode,algo,conn_rate,conn_rate_max,conn_tot,intercepted,dcon,dses,wrew,c"
    "onnect,reuse,cache_lookups,cache_hits,srv_icur,src_ilim,qtime_max,ctime_max,rtime_ma"
    "x,ttime_max,eint,idle_conn_cur,safe_conn_cur,used_conn_cur,need_conn_est,uweight,agg"
    "_server_status,agg_server_check_status,agg_check_status,srid,sess_other,h1sess,h2ses"
    "s,h3sess,req_other,h1req,h2req,h3req,proto,-,ssl_sess,ssl_reused_sess,ssl_failed_han"
    "dshake,h2_headers_rcvd,h2_data_rcvd,h2_settings_rcvd,h2_rst_stream_rcvd,h2_goaway_rc"
    "vd,h2_detected_conn_protocol_errors,h2_detected_strm_protocol_errors,h2_rst_stream_r"
    "esp,h2_goaway_resp,h2_open_connections,h2_backend_open_streams,h2_total_connections,"
    "h2_backend_total_streams,h1_open_connections,h1_open_streams,h1_total_connections,h1"
    "_total_streams,h1_bytes_in,h1_bytes_out,h1_spliced_bytes_in,h1_spliced_bytes_out,"
)
NAMES = HEADER[2:].split(",")


def _row(name: str, status: str, check: str, port: int) -> str:
    fields = dict.fromkeys(NAMES, "")
    fields.update(
        {"# pxname": "bench-app", "svname": name, "status": status, "check_status": check}
    )
    fields["addr"] = f"127.0.0.1:{port}"
    return ",".join(fields[n] for n in NAMES)


def _stats(*rows: str) -> str:
    return "\n".join([HEADER, *rows, "", ""])


def test_a_server_counts_once_up_with_a_check_completed():
    answer = _stats(
        _row("up", "UP", "L7OK", 1001),
        _row("checking-again", "UP", "* L7OK", 1002),
        _row("not-checked-yet", "UP", "INI", 1003),
        _row("first-check-running", "UP", "* INI", 1004),
        _row("rising", "UP 1/2", "L7OK", 1005),
        _row("draining", "DRAIN", "L7OK", 1006),
        _row("in-maintenance", "MAINT", "L7OK", 1007),
        _row("down", "DOWN", "L4CON", 1008),
    )

    assert settled_ports(answer) == {1001, 1002}


def test_two_servers_on_one_port_count_as_one():
    answer = _stats(_row("a", "UP", "L7OK", 1001), _row("a-2", "UP", "L7OK", 1001))

    assert settled_ports(answer) == {1001}


def test_an_answer_that_is_not_stats_has_no_servers():
    assert settled_ports("No such proxy.\n") == set()
    assert settled_ports("") == set()


def test_collections_inside_the_window_are_timed_and_full_ones_counted():
    collections = _Collections()
    collections.start()
    try:
        gc.collect()  # before the window: not counted
        collections.began()
        gc.collect()
        gc.collect(0)
        inside = collections.ended()
        gc.collect()  # after it: not counted
    finally:
        collections.stop()

    assert inside.full == 1
    assert 0 < inside.longest_s <= inside.total_s


def test_a_collection_on_another_thread_is_left_out():
    collections = _Collections()
    collections.start()
    try:
        collections.began()
        other = threading.Thread(target=gc.collect)
        other.start()
        other.join()
        window = collections.ended()
    finally:
        collections.stop()

    assert window.full == 0
    assert window.total_s == 0.0
