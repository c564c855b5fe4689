"""``train.init_from``: a run starts from another run's parameters, at another team size too.
The labels name the features the environment really computes; a network started at n = 4
from a network of n = 2 acts on an n = 4 world as the old one does on what it can see; the
driver trains from there; bad sources are refused naming the key and the reason."""
import doctest

import numpy as np
import pytest
import yaml

pytest.importorskip("optax")

import jax  # noqa: E402

import cube_jax  # noqa: E402
from cube_jax.rl import config as C  # noqa: E402
from cube_jax.rl import policy as rl_policy  # noqa: E402
from cube_jax.rl import transfer  # noqa: E402
from cube_jax.rl.checkpoint import read_meta, restore_runner  # noqa: E402
from cube_jax.rl.ppo import PPO  # noqa: E402
from tests.rl_tiny import TINY_GRU, TINY_PPO, TINY_WORLD  # noqa: E402

WORLD = list(TINY_WORLD)


def test_the_module_examples_hold():
    assert doctest.testmod(transfer).failed == 0
    assert transfer.BLOCKED_FEATURES == rl_policy.BLOCKED_FEATURES


@pytest.mark.parametrize("form", ["vector", "egocentric"])
@pytest.mark.parametrize("n", [2, 4])
def test_every_label_names_the_feature_the_environment_computes(form, n):
    env = cube_jax.make(n=n, observation=form, view_radius=2, pool_size=4)
    state, ts = env.reset(jax.random.PRNGKey(n))
    obs = np.asarray(ts.observation)  # [N, D]
    cfg = env.cfg
    labels = transfer.observation_labels(form, cfg.num_agents, cfg.num_blocks, view_radius=2)
    assert len(labels) == obs.shape[-1] and len(set(labels)) == len(labels)
    assert transfer.observation_labels(form, cfg.num_agents, cfg.num_blocks, 2, blocked_moves=True)[-4:] == [
        ("blocked", d) for d in range(4)]
    col = {label: i for i, label in enumerate(labels)}
    k, pos = cfg.grid_size, np.asarray(state.agent_pos)
    blocks, weights = np.asarray(state.block_pos), np.asarray(state.block_weight)
    for i in range(cfg.num_agents):
        assert obs[i, col[("id", i)]] == 1 and sum(obs[i, col[("id", j)]] for j in range(cfg.num_agents)) == 1
        assert obs[i, col[("own", "row")]] == pytest.approx(pos[i, 0] / (k - 1))
        assert obs[i, col[("own", "col")]] == pytest.approx(pos[i, 1] / (k - 1))
        assert obs[i, col[("time",)]] == 0
        if form != "vector":
            continue
        for j in range(cfg.num_agents):
            assert obs[i, col[("agent", j, "row")]] == pytest.approx((pos[j, 0] - pos[i, 0]) / k)
            assert obs[i, col[("agent", j, "col")]] == pytest.approx((pos[j, 1] - pos[i, 1]) / k)
        for b in range(cfg.num_blocks):
            assert obs[i, col[("block", b, 0)]] == pytest.approx((blocks[b, 0] - pos[i, 0]) / k)
            assert obs[i, col[("block", b, 1)]] == pytest.approx((blocks[b, 1] - pos[i, 1]) / k)
            assert obs[i, col[("block", b, 2)]] == pytest.approx(weights[b] / weights.max())
            assert obs[i, col[("block", b, 3)]] == 1


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A tiny IPPO run at n = 2 with blocked moves, saved."""
    from cube_jax.rl import run

    root = tmp_path_factory.mktemp("runs")
    cfg = C.build("ippo", overrides=list(TINY_PPO) + WORLD + [
        "env.n=2", "num_seeds=2", "network.blocked_moves=true", f"output.root={root}", "output.name=n2",
        "output.gif=false", "output.plot=false"])
    run.train_and_report(cfg)
    return root / "n2"


def _started(source, overrides, seeds, n, blocks):
    """IPPO built from ``overrides``, a fresh runner per seed, and ``init_from(source)``'s runner
    and line for a vector world of ``n`` agents and ``blocks`` blocks."""
    ppo = PPO(C.build("ippo", overrides=overrides))
    fresh = jax.jit(jax.vmap(ppo.init))(jax.random.split(jax.random.PRNGKey(1), seeds))
    started, line = transfer.init_from(source, fresh, algo="ippo", network=ppo.config.network.model_dump(),
                                       observation="vector", num_agents=n, num_blocks=blocks)
    return ppo, fresh, started, line


def test_a_network_started_at_n4_acts_as_the_n2_network_on_what_it_sees(source):
    overrides = list(TINY_PPO) + WORLD + ["env.n=4", "num_seeds=3", "network.blocked_moves=true",
                                          f"train.init_from={source}"]
    ppo, fresh, started, line = _started(source, overrides, 3, n=4, blocks=6)
    assert "seeds 0, 1, 0" in line and "2 first layer(s) re-indexed: 28 of 49 inputs carried over" in line
    saved = jax.tree.map(np.asarray, restore_runner(source / "checkpoint"))
    old_env = cube_jax.make(n=2, pool_size=16, max_steps=30)
    old = transfer.observation_labels("vector", 2, 3, blocked_moves=True)
    new = transfer.observation_labels("vector", 4, 6, blocked_moves=True)
    assert old_env.cfg.num_blocks == 3 and set(old) <= set(new)
    # Every layer but the first is the source seed's (i mod 2); the optimizer starts afresh.
    for seed, from_seed in enumerate([0, 1, 0]):
        for part in ("actor", "critic"):
            mine = jax.tree.map(lambda x: np.asarray(x)[seed], started.params[part])
            theirs = jax.tree.map(lambda x: x[from_seed], saved["params"][part])
            assert np.array_equal(mine["params"]["MLP_0"]["Dense_1"]["kernel"],
                                  theirs["params"]["MLP_0"]["Dense_1"]["kernel"])
            # The first layer: the same function of the features both worlds have, blind to the rest.
            x_new = np.asarray(jax.random.normal(jax.random.PRNGKey(seed), (5, len(new))), np.float32)
            x_old = x_new[:, [new.index(label) for label in old]]
            net = ppo.actor if part == "actor" else ppo.critic
            np.testing.assert_allclose(net.apply(mine, x_new), net.apply(theirs, x_old), rtol=1e-5, atol=1e-5)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.array_equal(a, b), started.opt_state, fresh.opt_state))

    # The driver trains from there, and says where it started.
    from cube_jax.rl import run

    cfg = C.build("ippo", overrides=overrides + [f"output.root={source.parent}", "output.name=n4",
                                                 "output.gif=false", "output.plot=false"])
    summary = run.train_and_report(cfg)
    assert summary["env_steps"] > 0
    assert yaml.safe_load((source.parent / "n4" / "config.yaml").read_text())["train"]["init_from"] == str(source)


def test_a_saved_policy_alone_starts_every_seed_and_the_critic_starts_fresh(source, tmp_path):
    # a checkpoint without runner/ (as the package ships its policies): the actor is carried over
    import shutil

    alone = tmp_path / "policy-only"
    alone.mkdir()
    shutil.copy(source / "checkpoint" / "policy.json", alone / "policy.json")
    shutil.copytree(source / "checkpoint" / "policy", alone / "policy")
    assert transfer.policy_only(alone) and not transfer.policy_only(source / "checkpoint")
    overrides = list(TINY_PPO) + WORLD + ["env.n=4", "num_seeds=2", "network.blocked_moves=true",
                                          f"train.init_from={alone}"]
    ppo, fresh, started, line = _started(alone, overrides, 2, n=4, blocks=6)
    assert "for every seed; the critic starts fresh; 1 first layer(s) re-indexed: 28 of 49" in line
    meta = read_meta(alone)
    saved = jax.tree.map(lambda x: np.asarray(x)[meta["seed_index"]], restore_runner(source / "checkpoint")["params"])
    old, new = (transfer.observation_labels("vector", n, b, blocked_moves=True) for n, b in ((2, 3), (4, 6)))
    x_new = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (5, len(new))), np.float32)
    x_old = x_new[:, [new.index(label) for label in old]]
    for seed in range(2):
        mine = jax.tree.map(lambda x: np.asarray(x)[seed], started.params["actor"])
        np.testing.assert_allclose(ppo.actor.apply(mine, x_new), ppo.actor.apply(saved["actor"], x_old),
                                   rtol=1e-5, atol=1e-5)
    assert jax.tree.all(jax.tree.map(lambda a, b: np.array_equal(a, b), started.params["critic"],
                                     fresh.params["critic"]))
    # MAPPO may start from a policy alone (its critic is not carried), from a MAPPO policy
    with pytest.raises(C.ConfigError, match="that run trained ippo, this one mappo"):
        C.build("mappo", overrides=overrides)


def test_a_shipped_policy_is_a_source_by_name():
    folder, meta = transfer.read_source("builtin:ippo-n3")
    assert transfer.policy_only(folder) and meta["env_kwargs"]["observation"] == "egocentric_noid"
    with pytest.raises(C.ConfigError, match="no built-in policy 'nope'; the package ships ippo-easy"):
        C.build("ippo", overrides=["train.init_from=builtin:nope"])
    with pytest.raises(C.ConfigError, match="that run observed 'egocentric_noid', this one env.observation='vector'"):
        C.build("ippo", overrides=["env.scenario=null", "env.n=4", "train.init_from=builtin:ippo-n3"])
    cfg = C.build("mappo", overrides=["env.scenario=null", "env.n=4", "env.observation=egocentric_noid",
                                      "train.init_from=builtin:mappo-n3"])
    assert cfg.train.init_from == "builtin:mappo-n3"


@pytest.mark.parametrize("override, message", [
    ("algo_mappo", "algo=mappo is not supported; ippo, pqn_vdn are"),
    ("network.hidden=32", "that run's network.hidden is 16, this one's 32"),
    ("network.blocked_moves=false", "that run's network.blocked_moves is True, this one's False"),
    ("env.observation=egocentric", "that run observed 'vector', this one env.observation='egocentric'"),
    ("missing", "no checkpoint there"),
    ("network.recurrent=true", "that run's network.recurrent is False, this one's True"),
])
def test_a_source_that_cannot_start_the_run_is_refused_naming_why(source, override, message):
    algo, overrides = "ippo", list(TINY_PPO) + WORLD + ["env.n=3", "network.blocked_moves=true",
                                                        f"train.init_from={source}"]
    if override == "algo_mappo":
        algo = "mappo"
    elif override == "missing":
        overrides[-1] = f"train.init_from={source.parent / 'nowhere'}"
    else:
        overrides.append(override)
    with pytest.raises(C.ConfigError, match="train.init_from") as err:
        C.build(algo, overrides=overrides)
    assert message in str(err.value)


def test_a_resumed_run_does_not_start_over_from_its_source(source, tmp_path):
    # output.resume reads the run's own config (which names the source) and continues its checkpoint.
    cfg = C.build("ippo", overrides=[f"output.resume={source}", f"train.init_from={tmp_path / 'gone'}"])
    assert cfg.output.resume == str(source)


def test_an_egocentric_window_of_another_radius_is_refused():
    meta = {"algo": "ippo", "env_kwargs": {"observation": "egocentric", "view_radius": 2, "n": 2},
            "network": {"hidden": 16, "layers": 1, "activation": "tanh", "recurrent": False}}
    network = dict(meta["network"], blocked_moves=False, gru_hidden=128)
    transfer.check_compatible(meta, "ippo", network, "egocentric", "RUN", view_radius=2)
    with pytest.raises(transfer.TransferError, match="that run's window had env.view_radius=2, this one 3"):
        transfer.check_compatible(meta, "ippo", network, "egocentric", "RUN", view_radius=3)


def test_a_recurrent_network_is_started_the_same_way(tiny_recurrent_run):
    _, _, rnn = tiny_recurrent_run  # n = 2, one seed
    _, _, started, line = _started(rnn, list(TINY_PPO + TINY_WORLD + TINY_GRU) + [
        "env.n=3", "num_seeds=2", f"train.init_from={rnn}"], 2, n=3, blocks=3)
    assert "seeds 0, 0" in line and "2 first layer(s) re-indexed: 24 of 27 inputs carried over" in line
    saved = restore_runner(rnn / "checkpoint")["params"]
    old, new = (transfer.observation_labels("vector", n, 3) for n in (2, 3))
    mine = jax.tree_util.tree_flatten_with_path(started.params)[0]
    theirs = dict((jax.tree_util.keystr(p), np.asarray(x)) for p, x in jax.tree_util.tree_flatten_with_path(saved)[0])
    embedded = 0
    for path, leaf in mine:
        source = theirs[jax.tree_util.keystr(path)][[0, 0]]
        if source.shape != leaf.shape:
            source, embedded = transfer.embed_first_layer(source, old, new), embedded + 1
        np.testing.assert_array_equal(np.asarray(leaf), source)
    assert embedded == 2  # the actor's and the critic's input layers; the GRUs and heads as they were
