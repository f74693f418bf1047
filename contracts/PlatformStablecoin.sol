// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title The platform's stablecoin: an ERC-20 whose issuer mints, burns and enforces compliance.
/// @notice A blocked address can neither send, receive, approve nor spend an allowance. A frozen
/// address keeps its balance and may still receive, but can neither send, approve nor spend until
/// it is unfrozen. The issuer mints to any address that is not blocked and burns from its own
/// balance (redemptions are transfers to the issuer followed by a burn), so the total supply always
/// equals everything minted minus everything burnt.
contract PlatformStablecoin {
    string public name;
    string public symbol;
    uint8 public decimals;
    uint256 public totalSupply;
    address public issuer;

    mapping(address account => uint256) public balanceOf;
    mapping(address owner => mapping(address spender => uint256)) public allowance;
    mapping(address account => bool) public isBlocked;
    mapping(address account => bool) public isFrozen;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event Blocked(address indexed account);
    event Unblocked(address indexed account);
    event Frozen(address indexed account);
    event Unfrozen(address indexed account);
    event IssuerChanged(address indexed previousIssuer, address indexed newIssuer);

    error NotIssuer(address caller);
    error ZeroAddress();
    error AccountBlocked(address account);
    error AccountFrozen(address account);
    error InsufficientBalance(address account, uint256 balance, uint256 needed);
    error InsufficientAllowance(address owner, address spender, uint256 allowance, uint256 needed);

    modifier onlyIssuer() {
        if (msg.sender != issuer) revert NotIssuer(msg.sender);
        _;
    }

    constructor(string memory name_, string memory symbol_, uint8 decimals_, address issuer_) {
        if (issuer_ == address(0)) revert ZeroAddress();
        name = name_;
        symbol = symbol_;
        decimals = decimals_;
        issuer = issuer_;
        emit IssuerChanged(address(0), issuer_);
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _requireMaySend(msg.sender);
        _move(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        _requireMaySend(msg.sender);
        _requireNotBlocked(spender);
        if (spender == address(0)) revert ZeroAddress();
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        _requireMaySend(msg.sender);
        _requireMaySend(from);
        uint256 allowed = allowance[from][msg.sender];
        if (allowed < value) revert InsufficientAllowance(from, msg.sender, allowed, value);
        unchecked {
            allowance[from][msg.sender] = allowed - value;
        }
        _move(from, to, value);
        return true;
    }

    function mint(address to, uint256 value) external onlyIssuer {
        _requireNotBlocked(to);
        if (to == address(0)) revert ZeroAddress();
        totalSupply += value;
        unchecked {
            // Cannot overflow: no balance exceeds the total supply, which was just checked.
            balanceOf[to] += value;
        }
        emit Transfer(address(0), to, value);
    }

    function burn(uint256 value) external onlyIssuer {
        uint256 balance = balanceOf[msg.sender];
        if (balance < value) revert InsufficientBalance(msg.sender, balance, value);
        unchecked {
            balanceOf[msg.sender] = balance - value;
            totalSupply -= value;
        }
        emit Transfer(msg.sender, address(0), value);
    }

    function blockAccount(address account) external onlyIssuer {
        if (!isBlocked[account]) {
            isBlocked[account] = true;
            emit Blocked(account);
        }
    }

    function unblockAccount(address account) external onlyIssuer {
        if (isBlocked[account]) {
            isBlocked[account] = false;
            emit Unblocked(account);
        }
    }

    function freezeAccount(address account) external onlyIssuer {
        if (!isFrozen[account]) {
            isFrozen[account] = true;
            emit Frozen(account);
        }
    }

    function unfreezeAccount(address account) external onlyIssuer {
        if (isFrozen[account]) {
            isFrozen[account] = false;
            emit Unfrozen(account);
        }
    }

    function changeIssuer(address newIssuer) external onlyIssuer {
        if (newIssuer == address(0)) revert ZeroAddress();
        emit IssuerChanged(issuer, newIssuer);
        issuer = newIssuer;
    }

    /// Moves `value` from `from` to `to`; the sender's own checks are done by the caller.
    function _move(address from, address to, uint256 value) private {
        _requireNotBlocked(to);
        if (to == address(0)) revert ZeroAddress();
        uint256 balance = balanceOf[from];
        if (balance < value) revert InsufficientBalance(from, balance, value);
        unchecked {
            // Cannot overflow: the sum of all balances is the total supply.
            balanceOf[from] = balance - value;
            balanceOf[to] += value;
        }
        emit Transfer(from, to, value);
    }

    function _requireMaySend(address account) private view {
        _requireNotBlocked(account);
        if (isFrozen[account]) revert AccountFrozen(account);
    }

    function _requireNotBlocked(address account) private view {
        if (isBlocked[account]) revert AccountBlocked(account);
    }
}
