%% bench/peers/erlang/bench.erl: the Erlang peer of the stepx benchmark suite
%% (see docs/BENCHMARKS.md: its workloads, sizes and targets).
%%
%%   erlc -o <dir> bench.erl
%%   erl -noshell +P 5000000 -pa <dir> -run bench main <name> <n>
%%
%% Workloads: skynet, pingpong, ring, fanin, spawnidle. Prints one line, the
%% same as bench/stepx-bench:
%%
%%   bench=<name> runtime=erlang n=<n> secs=<s> ns_per_op=<ns>
%%     ops_per_sec=<ops> ok=<1|0> schedulers=<k>
%%
%% and nothing else on stdout. Each workload has the same program shape as
%% its stepx twin in bench/stepx_bench.c and checks its own result; ok=1 only
%% when the check passed. Schedulers are left at the default (one per core).
%% The time is taken inside the VM: VM start-up is not counted.
-module(bench).
-export([main/1]).

main([Name, NStr]) ->
    N = list_to_integer(NStr),
    true = N > 0,
    T0 = erlang:monotonic_time(nanosecond),
    Ok = run(Name, N),
    T1 = erlang:monotonic_time(nanosecond),
    Secs = (T1 - T0) / 1.0e9,
    Ns = (T1 - T0) / N,
    io:format("bench=~s runtime=erlang n=~b secs=~.6f ns_per_op=~.2f "
              "ops_per_sec=~b ok=~b schedulers=~b~n",
              [Name, N, Secs, Ns, round(N / Secs), ok_int(Ok),
               erlang:system_info(schedulers_online)]),
    halt(case Ok of true -> 0; false -> 1 end);
main(_) ->
    io:format(standard_error, "usage: bench main <skynet|pingpong|ring|fanin|"
              "spawnidle> <n>~n", []),
    halt(2).

ok_int(true) -> 1;
ok_int(false) -> 0.

run("skynet", N) ->
    Self = self(),
    spawn(fun() -> skynet(Self, 0, N) end),
    receive Sum -> Sum =:= N * (N - 1) div 2 end;
run("pingpong", N) -> ring(2, N);
run("ring", N) -> ring(503, N);
run("fanin", N) -> fanin(N);
run("spawnidle", N) -> spawnidle(N);
run(Other, _) ->
    io:format(standard_error, "bench: unknown workload '~s'~n", [Other]),
    halt(2).

%% skynet: each process spawns 10 children and sums the 10 numbers they
%% send back; a leaf sends its number.
skynet(Parent, Num, 1) ->
    Parent ! Num;
skynet(Parent, Num, Size) ->
    Self = self(),
    Sub = Size div 10,
    spawn_children(Self, Num, Sub, 0),
    Parent ! sum_children(10, 0).

spawn_children(_, _, _, 10) -> ok;
spawn_children(Self, Num, Sub, I) ->
    spawn(fun() -> skynet(Self, Num + I * Sub, Sub) end),
    spawn_children(Self, Num, Sub, I + 1).

sum_children(0, Sum) -> Sum;
sum_children(K, Sum) -> receive V -> sum_children(K - 1, Sum + V) end.

%% ring / pingpong: M processes in a ring pass a token N hops. The token
%% starts at N-1 and each hop decrements it; whoever sees 0 sends a stop
%% (-1) around once more and finishes; each process that sees the stop
%% forwards it and finishes (as in stepx_bench.c's ring_step). Every
%% process reports how many messages it saw: N tokens + M-1 stops.
ring(M, N) ->
    Self = self(),
    Pids = [spawn(fun() -> ring_start(Self) end) || _ <- lists:seq(1, M)],
    Next = tl(Pids) ++ [hd(Pids)],
    lists:foreach(fun({P, Q}) -> P ! {next, Q} end, lists:zip(Pids, Next)),
    hd(Pids) ! N - 1,
    collect_seen(M, 0) =:= N + M - 1.

ring_start(Parent) ->
    receive {next, Next} -> ring_loop(Parent, Next, 0) end.

ring_loop(Parent, Next, Seen) ->
    receive
        T when T > 0 ->
            Next ! T - 1,
            ring_loop(Parent, Next, Seen + 1);
        _ ->
            Next ! -1,
            Parent ! {seen, Seen + 1}
    end.

collect_seen(0, Total) -> Total;
collect_seen(K, Total) -> receive {seen, S} -> collect_seen(K - 1, Total + S) end.

%% fanin: 2 producers each send N/2 messages to one consumer, which counts
%% them; each producer reports how many it sent.
fanin(N) ->
    Self = self(),
    C = spawn(fun() -> Self ! {got, consume(N, 0)} end),
    K0 = N - N div 2,
    K1 = N div 2,
    [spawn(fun() -> Self ! {sent, produce(C, 0, K)} end) || K <- [K0, K1]],
    Sent = receive {sent, A} -> receive {sent, B} -> A + B end end,
    Got = receive {got, G} -> G end,
    Sent =:= N andalso Got =:= N.

produce(_, I, K) when I >= K -> I;
produce(C, I, K) ->
    C ! I,
    produce(C, I + 1, K).

consume(N, N) -> N;
consume(N, Got) -> receive _ -> consume(N, Got + 1) end.

%% spawnidle: N processes that each wait for one message; then one message
%% each; wait for all to finish. Finishing counts itself in a shared
%% counter (as stepx's finished count and Go's WaitGroup); the main process
%% polls it every 1 ms.
spawnidle(N) ->
    C = counters:new(1, [write_concurrency]),
    Pids = [spawn(fun() -> receive go -> counters:add(C, 1, 1) end end)
            || _ <- lists:seq(1, N)],
    lists:foreach(fun(P) -> P ! go end, Pids),
    wait_count(C, N).

wait_count(C, N) ->
    case counters:get(C, 1) of
        N -> true;
        K when K > N -> false;
        _ -> receive after 1 -> wait_count(C, N) end
    end.
